//! [`UserOp`]: an op wgalloc does not ship, described by its WGSL, its entry points,
//! how its bindings map to a node's tensors, and closures for the shape check, the
//! workgroup count, the parameter block and (optionally) the CPU reference.

use std::fmt;
use std::sync::Arc;

use crate::exec::KernelParams;

/// What one storage binding of a user kernel binds: a node's input or its output.
/// Binding `k` of a map (0-based) is `@binding(k + 1)` in the WGSL; `@binding(0)` is
/// always the parameter block.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Bind {
    /// The node's input `i` (0-based, in the node's order).
    Input(usize),
    /// The node's output.
    Output,
}

/// The shapes of one node of a user op, and its parameters: what the shape check, the
/// workgroup count, the parameter block and the CPU reference see.
#[derive(Debug, Clone, PartialEq)]
pub struct OpShapes {
    /// Each input's shape, in the node's order.
    pub inputs: Vec<Vec<u64>>,
    /// The output's shape.
    pub output: Vec<u64>,
    /// The node's parameters ([`crate::graph::Node::params`]).
    pub params: Vec<f32>,
}

impl OpShapes {
    /// Elements of input `i` (0 when there is no such input).
    pub fn input_len(&self, i: usize) -> u64 {
        self.inputs.get(i).map_or(0, |s| elements(s))
    }

    /// Elements of the output.
    pub fn output_len(&self) -> u64 {
        elements(&self.output)
    }
}

/// The product of a shape's dimensions (saturating).
fn elements(shape: &[u64]) -> u64 {
    shape.iter().fold(1u64, |n, &d| n.saturating_mul(d))
}

/// Checks a node's shapes; `Err` says what is wrong.
pub(crate) type ShapeCheck = Arc<dyn Fn(&OpShapes) -> Result<(), String> + Send + Sync>;
/// Computes a node's workgroup grid (x, y, z) from its shapes.
pub(crate) type GridFn = Arc<dyn Fn(&OpShapes) -> [u64; 3] + Send + Sync>;
/// Computes a node's parameter block from its shapes and parameters.
pub(crate) type ParamsFn = Arc<dyn Fn(&OpShapes) -> KernelParams + Send + Sync>;
/// Computes a node's output on the CPU from its inputs' values (in the node's order).
pub(crate) type CpuFn = Arc<dyn Fn(&[&[f32]], &OpShapes) -> Vec<f32> + Send + Sync>;

/// Threads per workgroup the default grid assumes (`@workgroup_size(256)`).
pub const DEFAULT_WORKGROUP_THREADS: u64 = 256;

/// An op of your own, to register with [`crate::exec::register_op`] (on a device) or
/// [`crate::exec::UserOps::register`] (CPU only).
///
/// Its WGSL is joined behind `shaders/prelude.wgsl`, as every built-in kernel is: the
/// prelude declares `@group(0) @binding(0) var<uniform> params: Params;` and
/// `grid_element`; the source declares `struct Params` (4 × `u32` then 4 × `f32`, the
/// layout of [`KernelParams`]) and its storage bindings `@group(0) @binding(1..=n)
/// var<storage, read_write>`, `n` the length of the entry point's binding map. Every
/// tensor is `f32`.
///
/// Defaults: the grid is `[ceil(output elements / 256), 1, 1]`; the parameter block
/// is `ints = [output elements, input 0 elements, 0, 0]`, `floats` = the node's first
/// four parameters; no shape check beyond "every tensor is dense f32"; no CPU
/// reference; no in-place entry point.
#[derive(Clone)]
pub struct UserOp {
    pub(crate) name: String,
    pub(crate) source: String,
    pub(crate) entry: String,
    pub(crate) inputs: usize,
    pub(crate) bindings: Vec<Bind>,
    pub(crate) inplace: Option<(String, Vec<Bind>)>,
    pub(crate) check: Option<ShapeCheck>,
    pub(crate) grid: GridFn,
    pub(crate) params: ParamsFn,
    pub(crate) cpu: Option<CpuFn>,
}

impl fmt::Debug for UserOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UserOp")
            .field("name", &self.name)
            .field("entry", &self.entry)
            .field("inputs", &self.inputs)
            .field("bindings", &self.bindings)
            .field("inplace", &self.inplace)
            .field("check", &self.check.is_some())
            .field("cpu", &self.cpu.is_some())
            .finish_non_exhaustive()
    }
}

impl UserOp {
    /// An op named `name` (what graph nodes write as their op) taking `inputs` inputs,
    /// run by entry point `entry` of `source`. Its binding map starts as
    /// `[Input(0), .., Input(inputs - 1), Output]`.
    pub fn new(
        name: impl Into<String>,
        source: impl Into<String>,
        entry: impl Into<String>,
        inputs: usize,
    ) -> UserOp {
        let mut bindings: Vec<Bind> = (0..inputs).map(Bind::Input).collect();
        bindings.push(Bind::Output);
        UserOp {
            name: name.into(),
            source: source.into(),
            entry: entry.into(),
            inputs,
            bindings,
            inplace: None,
            check: None,
            grid: Arc::new(|s: &OpShapes| {
                [s.output_len().div_ceil(DEFAULT_WORKGROUP_THREADS), 1, 1]
            }),
            params: Arc::new(|s: &OpShapes| {
                let small = |v: u64| u32::try_from(v).unwrap_or(u32::MAX);
                let mut floats = [0.0; 4];
                for (slot, value) in floats.iter_mut().zip(&s.params) {
                    *slot = *value;
                }
                KernelParams {
                    ints: [small(s.output_len()), small(s.input_len(0)), 0, 0],
                    floats,
                }
            }),
            cpu: None,
        }
    }

    /// The op's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Inputs a node of this op takes.
    pub fn inputs(&self) -> usize {
        self.inputs
    }

    /// Sets the out-of-place binding map: entry `k` is `@binding(k + 1)`.
    pub fn bindings(mut self, map: &[Bind]) -> UserOp {
        self.bindings = map.to_vec();
        self
    }

    /// Adds an in-place entry point, run when the plan puts the node's output over its
    /// input 0 (mark such nodes `inplace` in the graph). Its map names inputs only;
    /// `Input(0)` is read and written. Only an op whose in-place kernel derives output
    /// element `i` from input-0 element `i` (elementwise) should be marked in place:
    /// that is what the planner and the checksum proof assume.
    pub fn inplace(mut self, entry: impl Into<String>, map: &[Bind]) -> UserOp {
        self.inplace = Some((entry.into(), map.to_vec()));
        self
    }

    /// Adds a shape check, run when a node is resolved; its `Err` becomes
    /// [`crate::exec::ExecError::BadShape`].
    pub fn check(
        mut self,
        check: impl Fn(&OpShapes) -> Result<(), String> + Send + Sync + 'static,
    ) -> UserOp {
        self.check = Some(Arc::new(check));
        self
    }

    /// Sets the workgroup grid. A dimension over the device's
    /// `max_compute_workgroups_per_dimension` refuses the graph before any submit.
    pub fn workgroups(
        mut self,
        grid: impl Fn(&OpShapes) -> [u64; 3] + Send + Sync + 'static,
    ) -> UserOp {
        self.grid = Arc::new(grid);
        self
    }

    /// Sets the parameter block.
    pub fn params(
        mut self,
        params: impl Fn(&OpShapes) -> KernelParams + Send + Sync + 'static,
    ) -> UserOp {
        self.params = Arc::new(params);
        self
    }

    /// Sets the CPU reference: the output's values from the inputs' (in the node's
    /// order), used by [`crate::exec::cpu_ref::evaluate_with`].
    pub fn cpu(
        mut self,
        cpu: impl Fn(&[&[f32]], &OpShapes) -> Vec<f32> + Send + Sync + 'static,
    ) -> UserOp {
        self.cpu = Some(Arc::new(cpu));
        self
    }

    /// Whether the op has an in-place entry point.
    pub fn has_inplace(&self) -> bool {
        self.inplace.is_some()
    }

    /// Whether the op has a CPU reference.
    pub fn has_cpu(&self) -> bool {
        self.cpu.is_some()
    }
}
