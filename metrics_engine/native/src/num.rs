//! Exact integers: i128 while they fit, arbitrary precision after an overflow; and the
//! correctly rounded integer division Python's `int / int` does (so finalizers are
//! bit-identical to the Python engine's).

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
                ux as f64 / uy as f64
            } else {
                match div_u128(ux, uy) {
                    Some(v) => v,
                    None => div_big(&BigUint::from(ux), &BigUint::from(uy)),
                }
            }
        }
        _ => div_big(a.big().magnitude(), b.big().magnitude()),
    };
    if neg { -q } else { q }
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
