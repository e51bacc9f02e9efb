//! Exact integers: i128 while they fit, arbitrary precision after an overflow; and the
//! correctly rounded integer division Python's `int / int` does (so finalizers are
//! bit-identical to the Python engine's).
//!
//! A quotient of operands past 128 bits (SKEWNESS divides the square of one i128 by the cube
//! of another: up to 256 over 384 bits) is taken in fixed-width integers on the stack
//! (`Wide`), not in heap-allocated big integers: the same quotient and remainder, so the same
//! double. Big integers remain for operands past 512 bits.

use num_bigint::{BigInt, BigUint, Sign};
use num_integer::Integer;
use num_traits::{ToPrimitive, Zero};

/// An exact integer. `S` while it fits in i128 (with margin), `B` after an overflow.
#[derive(Clone, Debug)]
pub enum Num {
    S(i128),
    B(BigInt),
}

impl Num {
    pub const ZERO: Num = Num::S(0);

    pub fn big(&self) -> BigInt {
        match self {
            Num::S(v) => BigInt::from(*v),
            Num::B(b) => b.clone(),
        }
    }

    /// Back to i128 when a big value fits again (after evictions).
    pub fn norm(b: BigInt) -> Num {
        match b.to_i128() {
            Some(v) => Num::S(v),
            None => Num::B(b),
        }
    }

    pub fn is_zero(&self) -> bool {
        match self {
            Num::S(v) => *v == 0,
            Num::B(b) => b.is_zero(),
        }
    }

    pub fn add(&self, o: &Num) -> Num {
        if let (Num::S(a), Num::S(b)) = (self, o) {
            if let Some(r) = a.checked_add(*b) {
                return Num::S(r);
            }
        }
        Num::norm(self.big() + o.big())
    }

    pub fn sub(&self, o: &Num) -> Num {
        if let (Num::S(a), Num::S(b)) = (self, o) {
            if let Some(r) = a.checked_sub(*b) {
                return Num::S(r);
            }
        }
        Num::norm(self.big() - o.big())
    }

    pub fn mul(&self, o: &Num) -> Num {
        if let (Num::S(a), Num::S(b)) = (self, o) {
            if let Some(r) = a.checked_mul(*b) {
                return Num::S(r);
            }
        }
        Num::norm(self.big() * o.big())
    }

    pub fn shl(&self, d: u32) -> Num {
        if d == 0 {
            return self.clone();
        }
        if let Num::S(a) = self {
            let bits = 128 - a.unsigned_abs().leading_zeros();
            if bits + d < 126 {
                return Num::S(a << d);
            }
        }
        Num::norm(self.big() << d as usize)
    }

    /// Floor shift (exact here: callers only shift multiples of 2**d).
    pub fn shr(&self, d: u32) -> Num {
        if d == 0 {
            return self.clone();
        }
        match self {
            Num::S(a) => Num::S(if d >= 127 { if *a < 0 { -1 } else { 0 } } else { a >> d }),
            Num::B(b) => Num::norm(b >> d as usize),
        }
    }

    pub fn is_negative(&self) -> bool {
        match self {
            Num::S(v) => *v < 0,
            Num::B(b) => b.sign() == Sign::Minus,
        }
    }

    /// Canonical bytes (the same for `S` and `B` of one value): for digests and snapshots.
    pub fn to_bytes(&self) -> Vec<u8> {
        self.big().to_signed_bytes_le()
    }

    pub fn from_bytes(b: &[u8]) -> Num {
        Num::norm(BigInt::from_signed_bytes_le(b))
    }
}

/// `x * 2**e`, exact while the result is a normal double.
fn ldexp(mut x: f64, mut e: i64) -> f64 {
    while e > 1000 {
        x *= 2f64.powi(1000);
        e -= 1000;
    }
    while e < -1000 {
        x *= 2f64.powi(-1000);
        e += 1000;
    }
    x * 2f64.powi(e as i32)
}

/// Round a 55- or 56-bit quotient `q` (plus `sticky` if a remainder was dropped) to the bits
/// a double has for it, half to even, and scale it by `2**e`. A result below 2**-1022 is
/// subnormal and has fewer than 53 bits: it is rounded once, to a multiple of 2**-1074 (a
/// 53-bit rounding followed by `ldexp` would round twice).
fn round_quotient(q: u64, sticky: bool, e: i64) -> f64 {
    let bits = 64 - q.leading_zeros() as i64;
    let shift = (bits - 53).max(-1074 - e);
    if shift <= 0 {
        return ldexp(q as f64, e); // exact: at most 53 bits, a multiple of 2**-1074
    }
    if shift >= 64 {
        return 0.0; // below half of 2**-1074
    }
    let mut m = q >> shift;
    let low = q & ((1u64 << shift) - 1);
    let half = 1u64 << (shift - 1);
    if low > half || (low == half && (sticky || m & 1 == 1)) {
        m += 1;
    }
    ldexp(m as f64, e + shift)
}

fn div_u128(a: u128, b: u128) -> Option<f64> {
    let la = 128 - a.leading_zeros() as i64;
    let lb = 128 - b.leading_zeros() as i64;
    let s = 55 - (la - lb);
    let (q, r) = if s >= 0 {
        if la + s > 127 {
            return None;
        }
        let n = a << s;
        (n / b, n % b)
    } else {
        let d = b << (-s);
        (a / d, a % d)
    };
    Some(round_quotient(q as u64, r != 0, -s))
}

fn div_big(a: &BigUint, b: &BigUint) -> f64 {
    let la = a.bits() as i64;
    let lb = b.bits() as i64;
    let s = 55 - (la - lb);
    let (q, r) = if s >= 0 { (a << s as usize).div_rem(b) } else { a.div_rem(&(b << (-s) as usize)) };
    round_quotient(q.to_u64().unwrap_or(u64::MAX), !r.is_zero(), -s)
}

/// An unsigned integer of 512 bits, in 64-bit limbs, least significant first: what a
/// finalizer's ratio needs past 128 bits, with no allocation.
#[derive(Clone, Copy, PartialEq, Eq)]
struct Wide([u64; 8]);

impl Wide {
    fn from_u128(v: u128) -> Wide {
        let mut w = [0u64; 8];
        w[0] = v as u64;
        w[1] = (v >> 64) as u64;
        Wide(w)
    }

    fn bits(&self) -> u32 {
        for i in (0..8).rev() {
            if self.0[i] != 0 {
                return 64 * i as u32 + 64 - self.0[i].leading_zeros();
            }
        }
        0
    }

    fn is_zero(&self) -> bool {
        self.0.iter().all(|&x| x == 0)
    }

    fn low_u128(&self) -> u128 {
        self.0[0] as u128 | (self.0[1] as u128) << 64
    }

    /// `self * m`; None past 512 bits.
    fn mul_u64(&self, m: u64) -> Option<Wide> {
        let mut out = [0u64; 8];
        let mut carry: u128 = 0;
        for (o, &x) in out.iter_mut().zip(&self.0) {
            let p = x as u128 * m as u128 + carry;
            *o = p as u64;
            carry = p >> 64;
        }
        (carry == 0).then_some(Wide(out))
    }

    /// `self * m`; None past 512 bits.
    fn mul_u128(&self, m: u128) -> Option<Wide> {
        let lo = self.mul_u64(m as u64)?;
        let hi = self.mul_u64((m >> 64) as u64)?;
        if hi.0[7] != 0 {
            return None;
        }
        let mut up = [0u64; 8];
        up[1..].copy_from_slice(&hi.0[..7]);
        lo.add(&Wide(up))
    }

    /// `self + o`; None past 512 bits.
    fn add(&self, o: &Wide) -> Option<Wide> {
        let mut out = [0u64; 8];
        let mut carry = false;
        for i in 0..8 {
            let (s, c1) = self.0[i].overflowing_add(o.0[i]);
            let (s, c2) = s.overflowing_add(carry as u64);
            out[i] = s;
            carry = c1 || c2;
        }
        (!carry).then_some(Wide(out))
    }

    /// `self - o`, for `self >= o`.
    fn sub(&self, o: &Wide) -> Wide {
        let mut out = [0u64; 8];
        let mut borrow = false;
        for i in 0..8 {
            let (d, b1) = self.0[i].overflowing_sub(o.0[i]);
            let (d, b2) = d.overflowing_sub(borrow as u64);
            out[i] = d;
            borrow = b1 || b2;
        }
        Wide(out)
    }

    /// `self << s`, for `bits() + s <= 512`.
    fn shl(&self, s: u32) -> Wide {
        let (l, b) = ((s / 64) as usize, s % 64);
        let mut out = [0u64; 8];
        for i in l..8 {
            let j = i - l;
            let mut v = self.0[j] << b;
            if b > 0 && j > 0 {
                v |= self.0[j - 1] >> (64 - b);
            }
            out[i] = v;
        }
        Wide(out)
    }

    /// `self >> s` (floor).
    fn shr(&self, s: u32) -> Wide {
        let (l, b) = ((s / 64) as usize, s % 64);
        let mut out = [0u64; 8];
        for (i, o) in out.iter_mut().enumerate() {
            let j = i + l;
            if j >= 8 {
                break;
            }
            let mut v = self.0[j] >> b;
            if b > 0 && j + 1 < 8 {
                v |= self.0[j + 1] << (64 - b);
            }
            *o = v;
        }
        Wide(out)
    }

    fn cmp(&self, o: &Wide) -> std::cmp::Ordering {
        for i in (0..8).rev() {
            match self.0[i].cmp(&o.0[i]) {
                std::cmp::Ordering::Equal => continue,
                c => return c,
            }
        }
        std::cmp::Ordering::Equal
    }
}

/// `div_big` in `Wide`s, for `a, b > 0`: the same 55- or 56-bit quotient and remainder, so
/// the same double. None when a shifted operand would pass 512 bits.
fn div_wide(a: &Wide, b: &Wide) -> Option<f64> {
    let la = a.bits() as i64;
    let lb = b.bits() as i64;
    let s = 55 - (la - lb);
    let (x, y) = if s >= 0 {
        if la + s > 512 {
            return None;
        }
        (a.shl(s as u32), *b)
    } else {
        (*a, b.shl((-s) as u32)) // lb - s = la - 55 bits
    };
    // x has 55 bits more than y: q = floor(x / y) is below 2**56. Estimated from y's top 64
    // bits (and x's bits above the same place), the estimate is q or q + 1 (the error is
    // below q / 2**63); the remainder's sign says which.
    let k = (y.bits()).saturating_sub(64);
    let yt = y.shr(k).low_u128();
    let xt = x.shr(k);
    if xt.bits() > 128 || yt == 0 {
        return None;
    }
    let mut q = xt.low_u128() / yt;
    if q >> 64 != 0 {
        return None;
    }
    let mut p = y.mul_u64(q as u64)?;
    while p.cmp(&x) == std::cmp::Ordering::Greater {
        q -= 1;
        p = p.sub(&y);
    }
    let r = x.sub(&p);
    Some(round_quotient(q as u64, !r.is_zero(), -s))
}

/// Python's `a / b` for ints `a` and `b > 0`: the correctly rounded double.
pub fn div(a: &Num, b: &Num) -> f64 {
    if a.is_zero() {
        return 0.0;
    }
    let neg = a.is_negative() != b.is_negative();
    let q = match (a, b) {
        (Num::S(x), Num::S(y)) => {
            let (ux, uy) = (x.unsigned_abs(), y.unsigned_abs());
            if ux < (1u128 << 53) && uy < (1u128 << 53) {
                // Both exact as f64 either way; through u64 the conversion is one
                // instruction, not a 128-bit conversion routine call (AVG's every output).
                (ux as u64) as f64 / (uy as u64) as f64
            } else {
                match div_u128(ux, uy) {
                    Some(v) => v,
                    None => div_wide(&Wide::from_u128(ux), &Wide::from_u128(uy)).unwrap_or_else(
                        || div_big(&BigUint::from(ux), &BigUint::from(uy))),
                }
            }
        }
        _ => div_big(a.big().magnitude(), b.big().magnitude()),
    };
    if neg { -q } else { q }
}

/// Python's `a * a / (b * b * b)` for ints `a` and `b > 0` (SKEWNESS's ratio): the
/// correctly rounded double. Operands within i128 (all but the most extreme windows) are
/// squared and cubed in `Wide`s, with no allocation; others in big integers.
pub fn div_square_by_cube(a: &Num, b: &Num) -> f64 {
    if a.is_zero() {
        return 0.0;
    }
    if let (Num::S(x), Num::S(y)) = (a, b) {
        if *y > 0 {
            let (ux, uy) = (x.unsigned_abs(), *y as u128);
            let wide = Wide::from_u128(ux).mul_u128(ux).and_then(|n| {
                let d = Wide::from_u128(uy).mul_u128(uy)?.mul_u128(uy)?;
                div_wide(&n, &d)
            });
            if let Some(q) = wide {
                return q;
            }
        }
    }
    div(&a.mul(a), &b.mul(b).mul(b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn division_is_correctly_rounded() {
        assert_eq!(div(&Num::S(1), &Num::S(3)), 1.0 / 3.0);
        assert_eq!(div(&Num::S(-7), &Num::S(2)), -3.5);
        let big = Num::S((1i128 << 100) + 1);
        assert_eq!(div(&big, &Num::S(1 << 47)), 2f64.powi(53));
    }

    #[test]
    fn subnormal_quotients_are_rounded_once() {
        // 3 / 2**1075 is 1.5 * 2**-1074: half way, to even (2 * 2**-1074); 2**-1075 and less
        // round to 0 (half to even), a bit more than half to 2**-1074.
        let tiny = f64::from_bits(1);
        let p1075 = Num::S(1).shl(1075);
        assert_eq!(div(&Num::S(3), &p1075), 2.0 * tiny);
        assert_eq!(div(&Num::S(1), &p1075), 0.0);
        assert_eq!(div(&Num::S((1 << 60) + 1), &Num::S(1).shl(1135)), tiny);
        // (2**53 + 3) / 2**1076 is 2**51 + 0.75 units of 2**-1074: up to 2**51 + 1 of them.
        let n = (1i128 << 53) + 3;
        assert_eq!(div(&Num::S(n), &Num::S(1).shl(1076)), f64::from_bits((1 << 51) + 1));
        // 1.5 * 2**-1074 plus a remainder far below: up, not to even (one rounding, sticky).
        let big = Num::S(3).shl(200).add(&Num::S(1));
        assert_eq!(div(&big, &Num::S(1).shl(1275)), 2.0 * tiny);
    }
}
