//! The fallback for values whose shape the file does not give: a small shape
//! inference over the ops that carry shapes in exported models, plus the evaluation of
//! the integer "shape arithmetic" (`Shape`, `Gather`, `Concat`, `Slice`, ...) that feeds
//! `Reshape` and `Expand`. Everything else must come from `value_info` (run
//! `onnx.shape_inference.infer_shapes` on the file first); a value neither gives is
//! a [`crate::graph::GraphError::ShapeUnknown`].

use super::ops::{classify, OpKind};
use super::proto::{AttributeProto, NodeProto, TensorProto, DATA_EXTERNAL};

/// Integer tensors larger than this are not evaluated (they are not shape arithmetic).
const MAX_INT_LEN: u64 = 1 << 16;

/// A small integer tensor whose value is known before the pass.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IntValue {
    /// Its shape.
    pub dims: Vec<u64>,
    /// Its elements, row-major.
    pub data: Vec<i64>,
}

impl IntValue {
    fn vector(data: Vec<i64>) -> IntValue {
        IntValue {
            dims: vec![data.len() as u64],
            data,
        }
    }
}

/// What a node's inputs are known to be, for inference.
pub struct Inputs<'a> {
    /// Each input's shape, when known (`None` also for an absent optional input).
    pub shapes: Vec<Option<Vec<u64>>>,
    /// Each input's value, when it is a known small integer tensor.
    pub ints: Vec<Option<&'a IntValue>>,
}

fn attr<'a>(node: &'a NodeProto, name: &str) -> Option<&'a AttributeProto> {
    node.attribute.iter().find(|a| a.name == name)
}

fn attr_int(node: &NodeProto, name: &str, default: i64) -> i64 {
    attr(node, name).map_or(default, |a| a.i)
}

/// The integer elements of a tensor literal held in the file (not external data).
pub fn tensor_ints(t: &TensorProto) -> Option<IntValue> {
    if t.data_location == DATA_EXTERNAL {
        return None;
    }
    let dims = t
        .dims
        .iter()
        .map(|&d| u64::try_from(d).ok())
        .collect::<Option<Vec<_>>>()?;
    let len = dims.iter().try_fold(1u64, |a, &d| a.checked_mul(d))?;
    if len > MAX_INT_LEN {
        return None;
    }
    let width: usize = match t.data_type {
        7 => 8,
        6 => 4,
        5 => 2,
        3 | 9 => 1,
        _ => return None,
    };
    let data: Vec<i64> = if !t.raw_data.is_empty() {
        t.raw_data
            .chunks_exact(width)
            .map(|c| {
                let mut b = [0u8; 8];
                b[..width].copy_from_slice(c);
                let v = i64::from_le_bytes(b);
                // Sign-extend the narrow types (bool and int8 are 0/1 or small).
                let shift = 64 - 8 * width as u32;
                (v << shift) >> shift
            })
            .collect()
    } else if t.data_type == 7 {
        t.int64_data.clone()
    } else {
        t.int32_data.iter().map(|&v| i64::from(v)).collect()
    };
    (data.len() as u64 == len).then_some(IntValue { dims, data })
}

/// Numpy broadcasting of shapes; `None` when they do not broadcast.
pub fn broadcast(shapes: &[&[u64]]) -> Option<Vec<u64>> {
    let rank = shapes.iter().map(|s| s.len()).max().unwrap_or(0);
    let mut out = vec![1u64; rank];
    for s in shapes {
        for (i, &d) in s.iter().enumerate() {
            let slot = &mut out[rank - s.len() + i];
            if *slot == 1 {
                *slot = d;
            } else if d != 1 && d != *slot {
                return None;
            }
        }
    }
    Some(out)
}

/// An axis in `[-rank, rank)` as an index.
fn axis(a: i64, rank: usize) -> Option<usize> {
    let r = i64::try_from(rank).ok()?;
    let a = if a < 0 { a + r } else { a };
    (0..r).contains(&a).then_some(a as usize)
}

/// The axes an `Unsqueeze`/`Squeeze` names: its second input (opset 13) or attribute.
fn axes_of(node: &NodeProto, inputs: &Inputs<'_>) -> Option<Vec<i64>> {
    match inputs.ints.get(1) {
        Some(Some(v)) => Some(v.data.clone()),
        _ => attr(node, "axes").map(|a| a.ints.clone()),
    }
}

/// `Reshape`'s output shape: `0` copies the input's dimension (unless `allowzero`),
/// `-1` takes what is left.
fn reshape(input: &[u64], target: &[i64], allow_zero: bool) -> Option<Vec<u64>> {
    let total = input.iter().try_fold(1u64, |a, &d| a.checked_mul(d))?;
    let mut out = Vec::with_capacity(target.len());
    let mut hole = None;
    for (i, &t) in target.iter().enumerate() {
        match t {
            -1 if hole.is_none() => {
                hole = Some(i);
                out.push(1);
            }
            0 if !allow_zero => out.push(*input.get(i)?),
            t => out.push(u64::try_from(t).ok()?),
        }
    }
    if let Some(i) = hole {
        let known = out.iter().try_fold(1u64, |a, &d| a.checked_mul(d))?;
        if known == 0 || total % known != 0 {
            return None;
        }
        out[i] = total / known;
    }
    Some(out)
}

/// Python-style slice of one axis of length `len`: its first index, its step and how
/// many elements it takes.
fn slice_bounds(len: u64, start: i64, end: i64, step: i64) -> Option<(i64, i64, u64)> {
    let n = i64::try_from(len).ok()?;
    let norm = |v: i64| if v < 0 { v.saturating_add(n) } else { v };
    if step > 0 {
        let (s, e) = (norm(start).clamp(0, n), norm(end).clamp(0, n));
        let count = if s < e { (e - s - 1) / step + 1 } else { 0 };
        Some((s, step, count as u64))
    } else if step < 0 {
        let (s, e) = (norm(start).clamp(-1, n - 1), norm(end).clamp(-1, n - 1));
        let count = if s > e {
            (s - e - 1) / step.saturating_neg() + 1
        } else {
            0
        };
        Some((s, step, count as u64))
    } else {
        None
    }
}

/// The indices a slice of a short axis takes.
fn slice_range(len: u64, start: i64, end: i64, step: i64) -> Option<Vec<u64>> {
    let (first, step, count) = slice_bounds(len, start, end, step)?;
    if count > MAX_INT_LEN {
        return None;
    }
    (0..count as i64)
        .map(|k| u64::try_from(first + k * step).ok())
        .collect()
}

/// The output shape of `node`'s output `index` from its inputs, for the ops this
/// fallback knows; `None` when it cannot tell.
pub fn output_shape(node: &NodeProto, index: usize, inputs: &Inputs<'_>) -> Option<Vec<u64>> {
    let op = node.op_type.as_str();
    let first = inputs.shapes.first().cloned().flatten();
    if index > 0 {
        return None;
    }
    match op {
        "Reshape" => reshape(
            &first?,
            &inputs.ints.get(1).copied().flatten()?.data,
            attr_int(node, "allowzero", 0) != 0,
        ),
        "Flatten" => {
            let s = first?;
            let a = attr_int(node, "axis", 1);
            let a = if a < 0 { a + s.len() as i64 } else { a };
            let a = usize::try_from(a).ok().filter(|&a| a <= s.len())?;
            let outer = s[..a].iter().try_fold(1u64, |x, &d| x.checked_mul(d))?;
            let inner = s[a..].iter().try_fold(1u64, |x, &d| x.checked_mul(d))?;
            Some(vec![outer, inner])
        }
        "Unsqueeze" => {
            let s = first?;
            let axes = axes_of(node, inputs)?;
            let rank = s.len() + axes.len();
            let mut ones = vec![false; rank];
            for a in axes {
                ones[axis(a, rank)?] = true;
            }
            let mut rest = s.into_iter();
            ones.into_iter()
                .map(|one| if one { Some(1) } else { rest.next() })
                .collect()
        }
        "Squeeze" => {
            let s = first?;
            match axes_of(node, inputs) {
                Some(axes) => {
                    let drop = axes
                        .iter()
                        .map(|&a| axis(a, s.len()))
                        .collect::<Option<Vec<_>>>()?;
                    Some(
                        s.iter()
                            .enumerate()
                            .filter(|(i, _)| !drop.contains(i))
                            .map(|(_, &d)| d)
                            .collect(),
                    )
                }
                None => Some(s.into_iter().filter(|&d| d != 1).collect()),
            }
        }
        "Expand" => {
            let target = inputs.ints.get(1).copied().flatten()?;
            let target = target
                .data
                .iter()
                .map(|&d| u64::try_from(d).ok())
                .collect::<Option<Vec<_>>>()?;
            broadcast(&[&first?, &target])
        }
        "Shape" => {
            let v = shape_value(node, &first?)?;
            Some(vec![v.len() as u64])
        }
        "Size" => Some(Vec::new()),
        "ConstantOfShape" => inputs
            .ints
            .first()
            .copied()
            .flatten()?
            .data
            .iter()
            .map(|&d| u64::try_from(d).ok())
            .collect(),
        "Transpose" => {
            let s = first?;
            let perm: Vec<i64> = match attr(node, "perm") {
                Some(a) => a.ints.clone(),
                None => (0..s.len() as i64).rev().collect(),
            };
            perm.iter()
                .map(|&p| axis(p, s.len()).map(|p| s[p]))
                .collect()
        }
        "Concat" => {
            let shapes = inputs.shapes.iter().cloned().collect::<Option<Vec<_>>>()?;
            let mut out = shapes.first()?.clone();
            let a = axis(attr_int(node, "axis", 0), out.len())?;
            out[a] = shapes
                .iter()
                .try_fold(0u64, |acc, s| acc.checked_add(*s.get(a)?))?;
            Some(out)
        }
        "Gather" => {
            let data = first?;
            let indices = inputs.shapes.get(1).cloned().flatten()?;
            let a = axis(attr_int(node, "axis", 0), data.len())?;
            Some([&data[..a], &indices[..], &data[a + 1..]].concat())
        }
        "MatMul" => {
            let a = first?;
            let b = inputs.shapes.get(1).cloned().flatten()?;
            if a.is_empty() || b.is_empty() {
                return None;
            }
            let (a2, b2) = (
                if a.len() == 1 {
                    vec![1, a[0]]
                } else {
                    a.clone()
                },
                if b.len() == 1 {
                    vec![b[0], 1]
                } else {
                    b.clone()
                },
            );
            let (m, k) = (a2[a2.len() - 2], a2[a2.len() - 1]);
            let (k2, n) = (b2[b2.len() - 2], b2[b2.len() - 1]);
            if k != k2 {
                return None;
            }
            let mut out = broadcast(&[&a2[..a2.len() - 2], &b2[..b2.len() - 2]])?;
            if a.len() > 1 {
                out.push(m);
            }
            if b.len() > 1 {
                out.push(n);
            }
            Some(out)
        }
        "Slice" => {
            let s = first?;
            let get = |i: usize| {
                inputs
                    .ints
                    .get(i)
                    .copied()
                    .flatten()
                    .map(|v| v.data.clone())
            };
            let (starts, ends) = (get(1)?, get(2)?);
            let axes = get(3).unwrap_or_else(|| (0..starts.len() as i64).collect());
            let steps = get(4).unwrap_or_else(|| vec![1; starts.len()]);
            let mut out = s.clone();
            for (i, &start) in starts.iter().enumerate() {
                let a = axis(*axes.get(i)?, s.len())?;
                out[a] = slice_bounds(s[a], start, *ends.get(i)?, *steps.get(i)?)?.2;
            }
            Some(out)
        }
        "Softmax"
        | "LogSoftmax"
        | "LayerNormalization"
        | "BatchNormalization"
        | "InstanceNormalization"
        | "Dropout"
        | "Identity" => first,
        _ if classify(&node.domain, op) == OpKind::Elementwise => {
            let shapes = inputs.shapes.iter().cloned().collect::<Option<Vec<_>>>()?;
            broadcast(&shapes.iter().map(|s| s.as_slice()).collect::<Vec<_>>())
        }
        _ => None,
    }
}

/// `Shape`'s value for an input of shape `shape` (with opset 15's `start`/`end`).
fn shape_value(node: &NodeProto, shape: &[u64]) -> Option<Vec<i64>> {
    let rank = shape.len() as i64;
    let norm = |v: i64| (if v < 0 { v + rank } else { v }).clamp(0, rank) as usize;
    let start = norm(attr_int(node, "start", 0));
    let end = norm(attr_int(node, "end", rank));
    shape[start..end.max(start)]
        .iter()
        .map(|&d| i64::try_from(d).ok())
        .collect()
}

fn binary(op: &str, a: i64, b: i64) -> Option<i64> {
    match op {
        "Add" => a.checked_add(b),
        "Sub" => a.checked_sub(b),
        "Mul" => a.checked_mul(b),
        "Div" => a.checked_div(b),
        "Mod" => a.checked_rem(b),
        "Max" => Some(a.max(b)),
        "Min" => Some(a.min(b)),
        "Equal" => Some(i64::from(a == b)),
        "Less" => Some(i64::from(a < b)),
        "Greater" => Some(i64::from(a > b)),
        _ => None,
    }
}

/// Element `i` of `v` broadcast to `len` elements (a scalar or one of the same length).
fn pick(v: &IntValue, i: usize) -> Option<i64> {
    match v.data.len() {
        1 => v.data.first().copied(),
        _ => v.data.get(i).copied(),
    }
}

/// The value of `node`'s first output when it is small integer shape arithmetic whose
/// inputs are known; `None` otherwise.
pub fn int_value(node: &NodeProto, inputs: &Inputs<'_>) -> Option<IntValue> {
    let int = |i: usize| inputs.ints.get(i).copied().flatten();
    let op = node.op_type.as_str();
    let value = match op {
        "Constant" => {
            if let Some(t) = attr(node, "value").and_then(|a| a.t.as_ref()) {
                tensor_ints(t)?
            } else if let Some(a) = attr(node, "value_int") {
                IntValue {
                    dims: Vec::new(),
                    data: vec![a.i],
                }
            } else {
                IntValue::vector(attr(node, "value_ints")?.ints.clone())
            }
        }
        "Shape" => IntValue::vector(shape_value(
            node,
            &inputs.shapes.first().cloned().flatten()?,
        )?),
        "Size" => IntValue {
            dims: Vec::new(),
            data: vec![i64::try_from(
                inputs
                    .shapes
                    .first()
                    .cloned()
                    .flatten()?
                    .iter()
                    .try_fold(1u64, |a, &d| a.checked_mul(d))?,
            )
            .ok()?],
        },
        "Identity" | "Cast" | "Reshape" | "Squeeze" | "Unsqueeze" | "Flatten" => {
            let v = int(0)?;
            let dims = output_shape(node, 0, inputs).unwrap_or_else(|| v.dims.clone());
            IntValue {
                dims,
                data: v.data.clone(),
            }
        }
        "Gather" => {
            let (data, indices) = (int(0)?, int(1)?);
            if data.dims.len() != 1 || attr_int(node, "axis", 0) != 0 {
                return None;
            }
            let n = data.data.len() as i64;
            let picked = indices
                .data
                .iter()
                .map(|&i| {
                    let i = if i < 0 { i + n } else { i };
                    usize::try_from(i)
                        .ok()
                        .and_then(|i| data.data.get(i).copied())
                })
                .collect::<Option<Vec<_>>>()?;
            IntValue {
                dims: indices.dims.clone(),
                data: picked,
            }
        }
        "Concat" => {
            let parts = (0..inputs.ints.len())
                .map(int)
                .collect::<Option<Vec<_>>>()?;
            if parts.iter().any(|p| p.dims.len() != 1) {
                return None;
            }
            IntValue::vector(parts.iter().flat_map(|p| p.data.iter().copied()).collect())
        }
        "Slice" => {
            let data = int(0)?;
            if data.dims.len() != 1 {
                return None;
            }
            let get = |i: usize| int(i).and_then(|v| v.data.first().copied());
            let (start, end) = (get(1)?, get(2)?);
            let step = get(4).unwrap_or(1);
            let picks = slice_range(data.data.len() as u64, start, end, step)?;
            IntValue::vector(
                picks
                    .iter()
                    .map(|&i| data.data.get(i as usize).copied())
                    .collect::<Option<Vec<_>>>()?,
            )
        }
        "ConstantOfShape" => {
            let dims = int(0)?
                .data
                .iter()
                .map(|&d| u64::try_from(d).ok())
                .collect::<Option<Vec<_>>>()?;
            let len = dims.iter().try_fold(1u64, |a, &d| a.checked_mul(d))?;
            if len > MAX_INT_LEN {
                return None;
            }
            let fill = match attr(node, "value").and_then(|a| a.t.as_ref()) {
                Some(t) => *tensor_ints(t)?.data.first()?,
                None => 0,
            };
            IntValue {
                dims,
                data: vec![fill; len as usize],
            }
        }
        "Where" => {
            let (c, a, b) = (int(0)?, int(1)?, int(2)?);
            let len = c.data.len().max(a.data.len()).max(b.data.len());
            let data = (0..len)
                .map(|i| {
                    Some(if pick(c, i)? != 0 {
                        pick(a, i)?
                    } else {
                        pick(b, i)?
                    })
                })
                .collect::<Option<Vec<_>>>()?;
            let dims = broadcast(&[&c.dims, &a.dims, &b.dims])?;
            IntValue { dims, data }
        }
        "Range" => {
            let (s, l, d) = (
                *int(0)?.data.first()?,
                *int(1)?.data.first()?,
                *int(2)?.data.first()?,
            );
            if d == 0 {
                return None;
            }
            let mut data = Vec::new();
            let mut v = s;
            while (d > 0 && v < l) || (d < 0 && v > l) {
                if data.len() as u64 >= MAX_INT_LEN {
                    return None;
                }
                data.push(v);
                v = v.checked_add(d)?;
            }
            IntValue::vector(data)
        }
        _ => {
            let (a, b) = (int(0)?, int(1)?);
            if a.data.len() != b.data.len() && a.data.len() != 1 && b.data.len() != 1 {
                return None;
            }
            let len = a.data.len().max(b.data.len());
            let data = (0..len)
                .map(|i| binary(op, pick(a, i)?, pick(b, i)?))
                .collect::<Option<Vec<_>>>()?;
            let dims = broadcast(&[&a.dims, &b.dims])?;
            IntValue { dims, data }
        }
    };
    Some(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(op: &str) -> NodeProto {
        NodeProto {
            op_type: op.into(),
            ..NodeProto::default()
        }
    }

    #[test]
    fn reshape_copies_zeros_and_fills_the_hole() {
        assert_eq!(reshape(&[2, 3, 4], &[0, -1], false), Some(vec![2, 12]));
        assert_eq!(reshape(&[2, 3, 4], &[5, -1], false), None);
    }

    #[test]
    fn broadcast_follows_numpy() {
        assert_eq!(broadcast(&[&[1, 128], &[4, 1, 1]]), Some(vec![4, 1, 128]));
        assert_eq!(broadcast(&[&[3], &[4]]), None);
    }

    #[test]
    fn expand_takes_its_shape_from_shape_arithmetic() {
        let shape = IntValue::vector(vec![1, 12, 128, 128]);
        let inputs = Inputs {
            shapes: vec![Some(vec![1, 1, 1, 128]), Some(vec![4])],
            ints: vec![None, Some(&shape)],
        };
        assert_eq!(
            output_shape(&node("Expand"), 0, &inputs),
            Some(vec![1, 12, 128, 128])
        );
    }

    #[test]
    fn shape_gather_concat_evaluate() {
        let inputs = Inputs {
            shapes: vec![Some(vec![1, 128, 768])],
            ints: vec![None],
        };
        let shape = int_value(&node("Shape"), &inputs).expect("evaluates");
        assert_eq!(shape.data, vec![1, 128, 768]);
        let idx = IntValue {
            dims: Vec::new(),
            data: vec![-1],
        };
        let g = int_value(
            &node("Gather"),
            &Inputs {
                shapes: vec![None, None],
                ints: vec![Some(&shape), Some(&idx)],
            },
        )
        .expect("evaluates");
        assert_eq!(g.data, vec![768]);
        assert!(g.dims.is_empty());
        let cat = int_value(
            &node("Concat"),
            &Inputs {
                shapes: vec![None, None],
                ints: vec![Some(&shape), Some(&shape)],
            },
        )
        .expect("evaluates");
        assert_eq!(cat.data.len(), 6);
    }

    #[test]
    fn slices_follow_python() {
        assert_eq!(slice_range(5, 1, 100, 1), Some(vec![1, 2, 3, 4]));
        assert_eq!(slice_range(5, -1, i64::MIN, -1), Some(vec![4, 3, 2, 1, 0]));
        assert_eq!(slice_range(5, 0, 5, 0), None);
    }
}
