//! What each ONNX op becomes in a [`crate::graph::Graph`]. The table is documented in
//! docs/onnx.md; this file is its single source.

/// How the importer maps one ONNX op.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OpKind {
    /// Output element `i` depends only on input elements `i`: may write in place over
    /// its first input when that input has the output's size (the node's `inplace`).
    Elementwise,
    /// No memory of its own: the output aliases the first input (a reshape, a
    /// squeeze, an identity, a broadcast that only sets a stride to 0).
    View,
    /// Produces a value that is known before the pass from shapes alone (`Shape`,
    /// `Size`), so it is a constant even when its input is an activation.
    ShapeOf,
    /// Produces a value from nothing (`Constant`, `ConstantOfShape`, `Range` with
    /// constant inputs are caught by the constant rule): a constant.
    Source,
    /// Anything else: a kernel that writes a fresh output.
    Compute,
}

/// Ops whose output may overwrite their first input.
const ELEMENTWISE: &[&str] = &[
    "Abs",
    "Acos",
    "Add",
    "And",
    "Asin",
    "Atan",
    "BitwiseAnd",
    "BitwiseNot",
    "BitwiseOr",
    "BitwiseXor",
    "Cast",
    "Ceil",
    "Celu",
    "Clip",
    "Cos",
    "Cosh",
    "Div",
    "Elu",
    "Erf",
    "Exp",
    "Floor",
    "Gelu",
    "HardSigmoid",
    "HardSwish",
    "LeakyRelu",
    "Log",
    "Max",
    "Min",
    "Mish",
    "Mod",
    "Mul",
    "Neg",
    "Not",
    "Or",
    "PRelu",
    "Pow",
    "Reciprocal",
    "Relu",
    "Round",
    "Selu",
    "Sigmoid",
    "Sign",
    "Sin",
    "Sinh",
    "Softplus",
    "Softsign",
    "Sqrt",
    "Sub",
    "Sum",
    "Tan",
    "Tanh",
    "ThresholdedRelu",
    "Where",
    "Xor",
];

/// Elementwise ops whose inputs may be swapped, so an activation of the output's size
/// can be moved to the front (where in-place writing looks).
const COMMUTATIVE: &[&str] = &["Add", "And", "Max", "Min", "Mul", "Or", "Sum", "Xor"];

/// Ops whose output aliases their first input.
const VIEWS: &[&str] = &[
    "Dropout",
    "Expand",
    "Flatten",
    "Identity",
    "Reshape",
    "Squeeze",
    "Unsqueeze",
];

/// Ops that produce a value from nothing.
const SOURCES: &[&str] = &["Constant"];

/// Ops whose value depends on their input's shape only.
const SHAPE_OF: &[&str] = &["Shape", "Size"];

/// The mapping of op `op_type` (default domain; other domains are all [`OpKind::Compute`]).
pub fn classify(domain: &str, op_type: &str) -> OpKind {
    if !domain.is_empty() && domain != "ai.onnx" {
        return OpKind::Compute;
    }
    if ELEMENTWISE.contains(&op_type) {
        OpKind::Elementwise
    } else if VIEWS.contains(&op_type) {
        OpKind::View
    } else if SHAPE_OF.contains(&op_type) {
        OpKind::ShapeOf
    } else if SOURCES.contains(&op_type) {
        OpKind::Source
    } else {
        OpKind::Compute
    }
}

/// Whether the op's inputs may be reordered (see [`COMMUTATIVE`]).
pub fn is_commutative(op_type: &str) -> bool {
    COMMUTATIVE.contains(&op_type)
}

/// Ops that draw random numbers: never folded into constants although they read no
/// activation.
pub fn is_random(op_type: &str) -> bool {
    op_type.starts_with("Random") || op_type == "Bernoulli" || op_type == "Multinomial"
}

/// The kernel name a node gets in the graph: the ONNX op in snake case (`MatMul` ->
/// `mat_mul`, `Relu` -> `relu`), so traces and ONNX imports read alike.
pub fn node_op_name(op_type: &str) -> String {
    let mut name = String::with_capacity(op_type.len() + 4);
    let mut previous_lower = false;
    for c in op_type.chars() {
        if c.is_ascii_uppercase() {
            if previous_lower {
                name.push('_');
            }
            name.push(c.to_ascii_lowercase());
            previous_lower = false;
        } else {
            name.push(c);
            previous_lower = c.is_ascii_lowercase() || c.is_ascii_digit();
        }
    }
    name
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn activations_are_elementwise_and_reshapes_are_views() {
        assert_eq!(classify("", "Relu"), OpKind::Elementwise);
        assert_eq!(classify("", "Add"), OpKind::Elementwise);
        assert_eq!(classify("", "Reshape"), OpKind::View);
        assert_eq!(classify("", "Shape"), OpKind::ShapeOf);
        assert_eq!(classify("", "Constant"), OpKind::Source);
        assert_eq!(classify("", "Conv"), OpKind::Compute);
        assert_eq!(classify("com.microsoft", "Relu"), OpKind::Compute);
    }

    #[test]
    fn op_names_are_snake_case() {
        assert_eq!(node_op_name("MatMul"), "mat_mul");
        assert_eq!(node_op_name("Relu"), "relu");
        assert_eq!(node_op_name("LayerNormalization"), "layer_normalization");
        assert_eq!(node_op_name("Conv"), "conv");
    }

    #[test]
    fn the_lists_are_sorted_and_disjoint() {
        for list in [ELEMENTWISE, COMMUTATIVE, VIEWS, SOURCES, SHAPE_OF] {
            assert!(list.windows(2).all(|w| w[0] < w[1]), "{list:?}");
        }
        for op in VIEWS.iter().chain(SHAPE_OF).chain(SOURCES) {
            assert!(!ELEMENTWISE.contains(op));
        }
        assert!(COMMUTATIVE.iter().all(|op| ELEMENTWISE.contains(op)));
    }
}
