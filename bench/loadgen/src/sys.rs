//! The few Linux calls the generator makes, each wrapped once: clocks, an absolute sleep, an
//! epoll set of connections, and a TCP connection whose reads carry the kernel's receive
//! time (`SO_TIMESTAMPNS`).

use std::io;
use std::net::TcpStream;
use std::os::fd::AsRawFd;

fn clock_ns(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    unsafe { libc::clock_gettime(clock, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// CLOCK_MONOTONIC, the clock of every due time.
pub fn monotonic_ns() -> u64 {
    clock_ns(libc::CLOCK_MONOTONIC)
}

/// CLOCK_REALTIME minus CLOCK_MONOTONIC now: turns a receive time (the kernel stamps packets
/// on the real-time clock) into a monotonic one. Taken afresh at each wakeup, so a step of the
/// real-time clock skews at most the answers read at that wakeup.
pub fn realtime_offset_ns() -> i64 {
    let mono = clock_ns(libc::CLOCK_MONOTONIC);
    let real = clock_ns(libc::CLOCK_REALTIME);
    real as i64 - mono as i64
}

/// Sleep until `at_ns` on CLOCK_MONOTONIC (absolute, so no drift; returns at once if past).
pub fn sleep_until(at_ns: u64) {
    let ts = timespec(at_ns);
    while unsafe { libc::clock_nanosleep(libc::CLOCK_MONOTONIC, libc::TIMER_ABSTIME, &ts, std::ptr::null_mut()) }
        == libc::EINTR
    {}
}

/// No timer slack (50 µs by default): sleeps end at their due time, not up to 50 µs later.
pub fn no_timer_slack() {
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong) };
}

fn timespec(ns: u64) -> libc::timespec {
    libc::timespec { tv_sec: (ns / 1_000_000_000) as _, tv_nsec: (ns % 1_000_000_000) as _ }
}

/// This process's (user, system) CPU seconds so far.
pub fn cpu_seconds() -> (f64, f64) {
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let s = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    (s(ru.ru_utime), s(ru.ru_stime))
}

/// A level-triggered epoll set of connections, each known by a number.
pub struct Epoll {
    fd: i32,
    events: Vec<libc::epoll_event>,
}

impl Epoll {
    pub fn new(capacity: usize) -> io::Result<Epoll> {
        let fd = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(Epoll { fd, events: vec![libc::epoll_event { events: 0, u64: 0 }; capacity.max(1)] })
    }

    /// Watch `stream` for reading (data or its end), reported as `key`. A closed descriptor
    /// leaves the set by itself.
    pub fn add(&self, stream: &TcpStream, key: usize) -> io::Result<()> {
        let mut ev = libc::epoll_event { events: libc::EPOLLIN as u32, u64: key as u64 };
        if unsafe { libc::epoll_ctl(self.fd, libc::EPOLL_CTL_ADD, stream.as_raw_fd(), &mut ev) } < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// The keys of the readable connections, waiting at most until `until_ns` (monotonic;
    /// None: without end; a past time: not at all).
    pub fn ready(&mut self, until_ns: Option<u64>) -> io::Result<impl Iterator<Item = usize> + '_> {
        let timeout = until_ns.map(|at| timespec(at.saturating_sub(monotonic_ns())));
        let timeout_ptr = timeout.as_ref().map_or(std::ptr::null(), |t| t as *const libc::timespec);
        let n = loop {
            // epoll_pwait2: a timeout in nanoseconds (epoll_wait's is in milliseconds).
            let n = unsafe {
                libc::syscall(
                    libc::SYS_epoll_pwait2,
                    self.fd,
                    self.events.as_mut_ptr(),
                    self.events.len() as libc::c_int,
                    timeout_ptr,
                    std::ptr::null::<libc::sigset_t>(),
                    0usize,
                )
            };
            if n >= 0 {
                break n as usize;
            }
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::Interrupted {
                return Err(e);
            }
        };
        Ok(self.events[..n].iter().map(|e| e.u64 as usize))
    }
}

impl Drop for Epoll {
    fn drop(&mut self) {
        unsafe { libc::close(self.fd) };
    }
}

/// A kept-alive connection: no Nagle delay, non-blocking, receive times on every read.
pub fn connect(target: &str) -> io::Result<TcpStream> {
    let stream = TcpStream::connect(target)?;
    stream.set_nodelay(true)?;
    let on: libc::c_int = 1;
    let rc = unsafe {
        libc::setsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_TIMESTAMPNS,
            &on as *const libc::c_int as *const libc::c_void,
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    stream.set_nonblocking(true)?;
    Ok(stream)
}

/// Send all of `bytes` (a request fits an idle connection's send buffer: a short write only
/// waits for room).
pub fn send_all(stream: &TcpStream, mut bytes: &[u8]) -> io::Result<()> {
    while !bytes.is_empty() {
        let n = unsafe {
            libc::send(stream.as_raw_fd(), bytes.as_ptr() as *const libc::c_void, bytes.len(), libc::MSG_NOSIGNAL)
        };
        if n < 0 {
            let e = io::Error::last_os_error();
            match e.kind() {
                io::ErrorKind::Interrupted => continue,
                io::ErrorKind::WouldBlock => {
                    let mut p = libc::pollfd { fd: stream.as_raw_fd(), events: libc::POLLOUT, revents: 0 };
                    unsafe { libc::poll(&mut p, 1, 1000) };
                    continue;
                }
                _ => return Err(e),
            }
        }
        bytes = &bytes[n as usize..];
    }
    Ok(())
}

/// What one read gave.
pub enum Read {
    /// Some bytes (appended to the buffer), and when the kernel received the last of them
    /// (real-time ns; None if the kernel gave no time).
    Bytes(Option<u64>),
    /// Nothing to read now.
    Empty,
    /// The peer closed the connection.
    End,
}

/// One non-blocking read onto the end of `buf`, with the receive time of its last byte.
pub fn recv_stamped(stream: &TcpStream, buf: &mut Vec<u8>, chunk: usize) -> io::Result<Read> {
    buf.reserve(chunk);
    let spare = buf.spare_capacity_mut();
    let mut iov = libc::iovec { iov_base: spare.as_mut_ptr() as *mut libc::c_void, iov_len: spare.len() };
    // Room for one SCM_TIMESTAMPNS message (a timespec), aligned for cmsghdr.
    let mut control = [0u64; 8];
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr() as *mut libc::c_void;
    msg.msg_controllen = std::mem::size_of_val(&control) as _;
    let n = loop {
        let n = unsafe { libc::recvmsg(stream.as_raw_fd(), &mut msg, 0) };
        if n >= 0 {
            break n as usize;
        }
        let e = io::Error::last_os_error();
        match e.kind() {
            io::ErrorKind::Interrupted => continue,
            io::ErrorKind::WouldBlock => return Ok(Read::Empty),
            _ => return Err(e),
        }
    };
    if n == 0 {
        return Ok(Read::End);
    }
    unsafe { buf.set_len(buf.len() + n) };
    let mut stamp = None;
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_TIMESTAMPNS {
                let ts = std::ptr::read_unaligned(libc::CMSG_DATA(c) as *const libc::timespec);
                stamp = Some(ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64);
            }
            c = libc::CMSG_NXTHDR(&msg, c);
        }
    }
    Ok(Read::Bytes(stamp))
}
