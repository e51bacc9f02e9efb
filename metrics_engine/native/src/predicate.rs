//! WHERE/RATIO predicates evaluated natively for the batched path, with exactly the rules of
//! predicates.py's closures (which `ingest` keeps using): a missing field or null makes a
//! comparison null (false); numbers (booleans included) compare by value across int/float;
//! strings compare with strings; comparing unrelated types is false (`!=`: true); `IN` is
//! Python's `in` over the literals; `NOT null` is null; AND/OR take truthiness.
//!
//! Only what has those rules here is lowered (`parse` says no otherwise, and the batch then
//! evaluates the Python closures): comparisons with a literal on one side, IN, IS NULL, NOT,
//! AND, OR, bare fields and literals. Arithmetic stays in Python.

use std::cmp::Ordering;

use pyo3::prelude::*;
use pyo3::types::{PyBool, PyFloat, PyInt, PyString, PyTuple};

use crate::value::{Interner, Val};

/// A value a predicate sees: a lowered scalar, or `Other` (a list or dict; its truthiness).
#[derive(Clone, Copy, Debug)]
pub enum PVal {
    Val(Val),
    Other(bool),
}

#[derive(Clone, Copy)]
pub enum Op {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

pub enum Node {
    Lit(PVal),
    Field(usize),
    Cmp(Op, Box<Node>, Box<Node>),
    In(Box<Node>, Vec<Val>),
    IsNull(Box<Node>),
    Not(Box<Node>),
    And(Box<Node>, Box<Node>),
    Or(Box<Node>, Box<Node>),
}

fn lit(v: &Bound<'_, PyAny>, strings: &mut Interner) -> Option<Val> {
    if v.is_none() {
        Some(Val::Null)
    } else if let Ok(s) = v.downcast::<PyString>() {
        strings.intern(s).ok().map(Val::Str)
    } else if let Ok(b) = v.downcast::<PyBool>() {
        Some(Val::Bool(b.is_true()))
    } else if v.is_instance_of::<PyInt>() {
        v.extract::<i64>().ok().map(|i| Val::Int(i as i128))
    } else if let Ok(f) = v.downcast::<PyFloat>() {
        let x = f.value();
        x.is_finite().then_some(Val::Float(x))
    } else {
        None
    }
}

/// Lower an expression tuple of predicates.py; fields are numbered in `fields` (by name).
/// None: not lowered natively (the caller keeps the Python closure).
pub fn parse(e: &Bound<'_, PyAny>, fields: &mut Vec<String>, strings: &mut Interner)
             -> Option<Node> {
    let t = e.downcast::<PyTuple>().ok()?;
    let tag: String = t.get_item(0).ok()?.extract().ok()?;
    let sub = |i: usize| t.get_item(i).ok();
    Some(match tag.as_str() {
        "lit" => Node::Lit(PVal::Val(lit(&sub(1)?, strings)?)),
        "field" => {
            let name: String = sub(1)?.extract().ok()?;
            let i = fields.iter().position(|f| *f == name).unwrap_or_else(|| {
                fields.push(name);
                fields.len() - 1
            });
            Node::Field(i)
        }
        "cmp" => {
            let op = match sub(1)?.extract::<String>().ok()?.as_str() {
                "=" => Op::Eq,
                "!=" => Op::Ne,
                "<" => Op::Lt,
                "<=" => Op::Le,
                ">" => Op::Gt,
                ">=" => Op::Ge,
                _ => return None,
            };
            let (a, b) = (parse(&sub(2)?, fields, strings)?, parse(&sub(3)?, fields, strings)?);
            // Two fields may both hold lists, which Python compares: not lowered.
            if !matches!(a, Node::Lit(_)) && !matches!(b, Node::Lit(_)) {
                return None;
            }
            if !matches!(a, Node::Lit(_) | Node::Field(_)) || !matches!(b, Node::Lit(_) | Node::Field(_)) {
                return None;
            }
            Node::Cmp(op, Box::new(a), Box::new(b))
        }
        "in" => {
            let inner = parse(&sub(1)?, fields, strings)?;
            let values = sub(2)?;
            let values = values.downcast::<PyTuple>().ok()?;
            let mut vs = vec![];
            for v in values.iter() {
                vs.push(lit(&v, strings)?);
            }
            Node::In(Box::new(inner), vs)
        }
        "isnull" => Node::IsNull(Box::new(parse(&sub(1)?, fields, strings)?)),
        "not" => Node::Not(Box::new(parse(&sub(1)?, fields, strings)?)),
        "and" => Node::And(Box::new(parse(&sub(1)?, fields, strings)?),
                           Box::new(parse(&sub(2)?, fields, strings)?)),
        "or" => Node::Or(Box::new(parse(&sub(1)?, fields, strings)?),
                         Box::new(parse(&sub(2)?, fields, strings)?)),
        _ => return None,
    })
}

fn numeric(v: &Val) -> bool {
    matches!(v, Val::Int(_) | Val::Bool(_) | Val::Float(_))
}

/// Python's `bool(v)`.
pub fn truthy(py: Python<'_>, v: &PVal, strings: &Interner) -> bool {
    match v {
        PVal::Other(t) => *t,
        PVal::Val(v) => match v {
            Val::Null => false,
            Val::Bool(b) => *b,
            Val::Int(i) => *i != 0,
            Val::Float(f) => *f != 0.0,
            Val::Str(id) => !strings.text(py, *id).is_empty(),
        },
    }
}

/// Python's `a == b` for scalars (numbers by value, booleans as numbers).
fn py_eq(py: Python<'_>, a: &Val, b: &Val, strings: &Interner) -> bool {
    match (a, b) {
        (Val::Null, Val::Null) => true,
        (Val::Str(x), Val::Str(y)) => x == y || strings.text(py, *x) == strings.text(py, *y),
        (x, y) if numeric(x) && numeric(y) => x.num_cmp(y) == Ordering::Equal,
        _ => false,
    }
}

impl Node {
    /// The node's value for a row whose predicate fields hold `vals`.
    pub fn eval(&self, py: Python<'_>, vals: &[PVal], strings: &Interner) -> PVal {
        let null = PVal::Val(Val::Null);
        let b = |x: bool| PVal::Val(Val::Bool(x));
        match self {
            Node::Lit(v) => *v,
            Node::Field(i) => vals[*i],
            Node::Cmp(op, l, r) => {
                let (l, r) = (l.eval(py, vals, strings), r.eval(py, vals, strings));
                let (l, r) = match (l, r) {
                    (PVal::Val(Val::Null), _) | (_, PVal::Val(Val::Null)) => return null,
                    (PVal::Val(l), PVal::Val(r)) => (l, r),
                    // A list or dict against a scalar: never equal, never ordered.
                    _ => return b(matches!(op, Op::Ne)),
                };
                let ord = match (&l, &r) {
                    (Val::Str(x), Val::Str(y)) => Some(strings.text(py, *x).cmp(strings.text(py, *y))),
                    (x, y) if numeric(x) && numeric(y) => Some(x.num_cmp(y)),
                    _ => None,
                };
                match (op, ord) {
                    (Op::Eq, o) => b(o == Some(Ordering::Equal)),
                    (Op::Ne, o) => b(o != Some(Ordering::Equal)),
                    (_, None) => b(false), // Python raises TypeError: false
                    (Op::Lt, Some(o)) => b(o == Ordering::Less),
                    (Op::Le, Some(o)) => b(o != Ordering::Greater),
                    (Op::Gt, Some(o)) => b(o == Ordering::Greater),
                    (Op::Ge, Some(o)) => b(o != Ordering::Less),
                }
            }
            Node::In(inner, values) => match inner.eval(py, vals, strings) {
                PVal::Val(Val::Null) => null,
                PVal::Other(_) => b(false), // unhashable: TypeError, false
                PVal::Val(v) => b(values.iter().any(|x| py_eq(py, &v, x, strings))),
            },
            Node::IsNull(inner) => b(matches!(inner.eval(py, vals, strings), PVal::Val(Val::Null))),
            Node::Not(inner) => match inner.eval(py, vals, strings) {
                PVal::Val(Val::Null) => null,
                v => b(!truthy(py, &v, strings)),
            },
            Node::And(l, r) => b(truthy(py, &l.eval(py, vals, strings), strings)
                && truthy(py, &r.eval(py, vals, strings), strings)),
            Node::Or(l, r) => b(truthy(py, &l.eval(py, vals, strings), strings)
                || truthy(py, &r.eval(py, vals, strings), strings)),
        }
    }
}
