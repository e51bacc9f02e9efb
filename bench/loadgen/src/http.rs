//! HTTP/1.1 bytes: the requests, built into a reused buffer (no allocation per request), and
//! the answers, recognised when complete (status, where the body lies) and read for the
//! first run's decision without parsing the JSON.

/// What an answer in a buffer is so far.
pub enum Answer {
    /// More bytes are needed.
    Partial,
    /// Complete: (status, the body's range in the buffer).
    Complete(u16, std::ops::Range<usize>),
    /// Not an HTTP/1.1 answer.
    Invalid,
}

/// The bodies (one a line, `@ID@` filled in with `<tag>-<n>`) and the head for each target.
pub struct Requests {
    /// (text before @ID@, text after it); None: the body has no id to fill in.
    templates: Vec<(Vec<u8>, Option<Vec<u8>>)>,
    /// Up to `Content-Length: ` for each target.
    heads: Vec<Vec<u8>>,
    /// `<tag>-`, the start of every id.
    id_prefix: Vec<u8>,
}

impl Requests {
    pub fn new(lines: &str, targets: &[String], path: &str, key: &str, tag: &str) -> Requests {
        let templates: Vec<_> = lines
            .lines()
            .filter(|l| !l.is_empty())
            .map(|l| match l.find("@ID@") {
                Some(at) => (l[..at].as_bytes().to_vec(), Some(l[at + 4..].as_bytes().to_vec())),
                None => (l.as_bytes().to_vec(), None),
            })
            .collect();
        assert!(!templates.is_empty(), "no bodies");
        let heads = targets
            .iter()
            .map(|t| {
                format!(
                    "POST {path} HTTP/1.1\r\nHost: {t}\r\nAuthorization: Bearer {key}\r\n\
                     Content-Type: application/json\r\nContent-Length: "
                )
                .into_bytes()
            })
            .collect();
        Requests { templates, heads, id_prefix: format!("{tag}-").into_bytes() }
    }

    /// Request `n` for `target`, written over `out`.
    pub fn build(&self, n: u64, target: usize, out: &mut Vec<u8>) {
        let mut id_digits = itoa::Buffer::new();
        let id = id_digits.format(n).as_bytes();
        let (head, tail) = &self.templates[(n % self.templates.len() as u64) as usize];
        let body_len = head.len() + tail.as_ref().map_or(0, |t| self.id_prefix.len() + id.len() + t.len());
        out.clear();
        out.extend_from_slice(&self.heads[target]);
        out.extend_from_slice(itoa::Buffer::new().format(body_len).as_bytes());
        out.extend_from_slice(b"\r\n\r\n");
        out.extend_from_slice(head);
        if let Some(tail) = tail {
            out.extend_from_slice(&self.id_prefix);
            out.extend_from_slice(id);
            out.extend_from_slice(tail);
        }
    }
}

pub fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

fn content_length(head: &[u8]) -> usize {
    for line in head.split(|&b| b == b'\n') {
        if line.len() > 15 && line[..15].eq_ignore_ascii_case(b"content-length:") {
            let v = std::str::from_utf8(&line[15..]).unwrap_or("0").trim();
            return v.parse().unwrap_or(0);
        }
    }
    0
}

/// Whether `buf` holds a whole answer (its head ends, then `Content-Length` bytes).
pub fn answer(buf: &[u8]) -> Answer {
    let Some(at) = find(buf, b"\r\n\r\n") else { return Answer::Partial };
    let head_end = at + 4;
    if buf.len() < 12 || !buf.starts_with(b"HTTP/1.") {
        return Answer::Invalid;
    }
    let Some(status) = std::str::from_utf8(&buf[9..12]).ok().and_then(|s| s.parse().ok()) else {
        return Answer::Invalid;
    };
    let length = content_length(&buf[..head_end]);
    if buf.len() < head_end + length {
        return Answer::Partial;
    }
    Answer::Complete(status, head_end..head_end + length)
}

/// The first run's decision in an order's answer, without parsing the JSON.
pub fn decision(body: &[u8]) -> &[u8] {
    match find(body, b"\"decision\":") {
        None => b"?",
        Some(at) => {
            let rest = &body[at + 11..];
            let end = rest.iter().position(|&b| b == b',' || b == b'}').unwrap_or(rest.len());
            let d = rest[..end].trim_ascii();
            d.strip_prefix(b"\"").and_then(|d| d.strip_suffix(b"\"")).unwrap_or(d)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_carries_its_id_and_its_body_length() {
        let r = Requests::new("{\"id\":\"x-@ID@\"}\nplain\n", &["h:1".into()], "/p", "k", "t");
        let mut out = Vec::new();
        r.build(1230, 0, &mut out);
        let text = String::from_utf8(out.clone()).unwrap();
        assert!(text.starts_with("POST /p HTTP/1.1\r\nHost: h:1\r\nAuthorization: Bearer k\r\n"));
        assert!(text.ends_with("Content-Length: 17\r\n\r\n{\"id\":\"x-t-1230\"}"), "{text}");
        r.build(7, 0, &mut out);
        assert!(String::from_utf8(out).unwrap().ends_with("Content-Length: 5\r\n\r\nplain"));
    }

    #[test]
    fn an_answer_is_complete_only_with_its_whole_body() {
        let full = b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nhello";
        assert!(matches!(answer(&full[..20]), Answer::Partial));
        assert!(matches!(answer(&full[..full.len() - 1]), Answer::Partial));
        match answer(full) {
            Answer::Complete(200, body) => assert_eq!(&full[body], b"hello"),
            _ => panic!("complete"),
        }
        assert!(matches!(answer(b"garbage\r\n\r\n"), Answer::Invalid));
        assert_eq!(decision(b"{\"runs\":[{\"decision\":\"accept\",\"s\":1}]}"), b"accept");
    }
}
