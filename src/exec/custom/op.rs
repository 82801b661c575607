//! [`UserOp`]: an op wgalloc does not ship, described by a WGSL module of its own, its
//! entry points, how its storage bindings map to a node's tensors, and closures for the
//! shape check, the workgroup grid, the parameter block and (optionally) the CPU
//! reference. The closures see an [`OpShapes`] whose accessors check ranks and indices
//! and return a [`ShapeError`] instead of panicking.

use std::fmt;
use std::sync::Arc;

use bytemuck::Pod;
use thiserror::Error;

/// What one storage binding of a user kernel binds: a node's input or its output.
/// Entry `k` of a binding map is the entry point's `k`-th storage binding in the order
/// of their `@binding` numbers (wgalloc reads them from the WGSL with naga).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Bind {
    /// The node's input `i` (0-based, in the node's order).
    Input(usize),
    /// The node's output.
    Output,
}

/// Why a user op's closure could not work with a node's shapes: a typed error that
/// becomes [`crate::exec::ExecError::BadShape`] (naming the node and op) when the
/// graph is checked, before anything is allocated or submitted.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
#[non_exhaustive]
pub enum ShapeError {
    /// The closure asked for an input the node does not have.
    #[error("input {input} asked for, the node has {inputs}")]
    NoInput {
        /// The index asked for.
        input: usize,
        /// Inputs the node has.
        inputs: usize,
    },
    /// A tensor does not have the rank the closure asked for.
    #[error("{tensor} has shape {shape:?} (rank {}), rank {expected} expected", .shape.len())]
    Rank {
        /// `input i` or `output`.
        tensor: String,
        /// The rank asked for.
        expected: usize,
        /// The tensor's shape.
        shape: Vec<u64>,
    },
    /// The closure asked for a node parameter the node does not have.
    #[error("parameter {index} asked for, the node has {params}")]
    NoParam {
        /// The index asked for.
        index: usize,
        /// Parameters the node has.
        params: usize,
    },
    /// A number does not fit the 32-bit field of a parameter block.
    #[error("{value} does not fit in 32 bits")]
    TooLarge {
        /// The number.
        value: u64,
    },
    /// The op's own refusal (a shape check's message).
    #[error("{0}")]
    Refused(String),
}

impl From<String> for ShapeError {
    fn from(message: String) -> ShapeError {
        ShapeError::Refused(message)
    }
}

impl From<&str> for ShapeError {
    fn from(message: &str) -> ShapeError {
        ShapeError::Refused(message.to_string())
    }
}

/// The shapes of one node of a user op, and its parameters: what the shape check, the
/// workgroup grid, the parameter block and the CPU reference see. Every accessor that
/// could index past a shape returns a [`ShapeError`].
#[derive(Debug, Clone, PartialEq)]
pub struct OpShapes {
    inputs: Vec<Vec<u64>>,
    output: Vec<u64>,
    params: Vec<f32>,
}

impl OpShapes {
    /// The shapes of a node: its inputs' in order, its output's, its parameters.
    pub fn new(inputs: Vec<Vec<u64>>, output: Vec<u64>, params: Vec<f32>) -> OpShapes {
        OpShapes {
            inputs,
            output,
            params,
        }
    }

    /// Every input's shape, in the node's order.
    pub fn inputs(&self) -> &[Vec<u64>] {
        &self.inputs
    }

    /// Input `i`'s shape.
    ///
    /// # Errors
    /// [`ShapeError::NoInput`] past the node's inputs.
    pub fn input(&self, i: usize) -> Result<&[u64], ShapeError> {
        self.inputs
            .get(i)
            .map(Vec::as_slice)
            .ok_or(ShapeError::NoInput {
                input: i,
                inputs: self.inputs.len(),
            })
    }

    /// Input `i`'s dimensions when it has rank `N` (`let [m, k] = s.dims(0)?;`).
    ///
    /// # Errors
    /// [`ShapeError::NoInput`], or [`ShapeError::Rank`] for another rank.
    pub fn dims<const N: usize>(&self, i: usize) -> Result<[u64; N], ShapeError> {
        ranked(self.input(i)?, || format!("input {i}"))
    }

    /// The output's shape.
    pub fn output(&self) -> &[u64] {
        &self.output
    }

    /// The output's dimensions when it has rank `N`.
    ///
    /// # Errors
    /// [`ShapeError::Rank`] for another rank.
    pub fn output_dims<const N: usize>(&self) -> Result<[u64; N], ShapeError> {
        ranked(&self.output, || "output".to_string())
    }

    /// The node's parameters ([`crate::graph::Node::params`]).
    pub fn params(&self) -> &[f32] {
        &self.params
    }

    /// The node's parameter `k`.
    ///
    /// # Errors
    /// [`ShapeError::NoParam`] past the node's parameters.
    pub fn param(&self, k: usize) -> Result<f32, ShapeError> {
        self.params.get(k).copied().ok_or(ShapeError::NoParam {
            index: k,
            params: self.params.len(),
        })
    }

    /// Elements of input `i` (0 when there is no such input).
    pub fn input_len(&self, i: usize) -> u64 {
        self.inputs.get(i).map_or(0, |s| elements(s))
    }

    /// Elements of the output.
    pub fn output_len(&self) -> u64 {
        elements(&self.output)
    }

    /// `value` as a `u32` for a parameter block field.
    ///
    /// # Errors
    /// [`ShapeError::TooLarge`] above `u32::MAX`.
    pub fn u32(value: u64) -> Result<u32, ShapeError> {
        u32::try_from(value).map_err(|_| ShapeError::TooLarge { value })
    }
}

fn ranked<const N: usize>(
    shape: &[u64],
    name: impl Fn() -> String,
) -> Result<[u64; N], ShapeError> {
    <[u64; N]>::try_from(shape).map_err(|_| ShapeError::Rank {
        tensor: name(),
        expected: N,
        shape: shape.to_vec(),
    })
}

/// The product of a shape's dimensions (saturating).
pub(crate) fn elements(shape: &[u64]) -> u64 {
    shape.iter().fold(1u64, |n, &d| n.saturating_mul(d))
}

/// Checks a node's shapes.
pub(crate) type ShapeCheck = Arc<dyn Fn(&OpShapes) -> Result<(), ShapeError> + Send + Sync>;
/// Computes a node's workgroup grid (x, y, z) from its shapes.
pub(crate) type GridFn = Arc<dyn Fn(&OpShapes) -> Result<[u64; 3], ShapeError> + Send + Sync>;
/// Computes a node's parameter block (its bytes) from its shapes and parameters.
pub(crate) type ParamsFn = Arc<dyn Fn(&OpShapes) -> Result<Vec<u8>, ShapeError> + Send + Sync>;
/// Computes a node's output on the CPU from its inputs' values (in the node's order).
pub(crate) type CpuFn = Arc<dyn Fn(&[&[f32]], &OpShapes) -> Vec<f32> + Send + Sync>;

/// The parameter block a user op asked for: its Rust size and how to compute it.
#[derive(Clone)]
pub(crate) struct ParamsBlock {
    /// `size_of` the Rust type.
    pub(crate) size: usize,
    /// Its bytes for one node.
    pub(crate) bytes: ParamsFn,
}

/// An op of your own, to register with [`crate::exec::register_op`] (on a device) or
/// [`crate::exec::UserOps::register`] (CPU only).
///
/// Its source is a WGSL module of its own: nothing is joined in front of it. Each
/// entry point declares what it binds in `@group(0)`:
/// * at most one `var<uniform>`: the parameter block, any struct, filled by
///   [`UserOp::params`] from a `Pod` Rust type of the same size (none at all is fine);
/// * its storage buffers, `var<storage, read>` or `var<storage, read_write>`, at any
///   `@binding` numbers. Entry `k` of the binding map ([`UserOp::bindings`]) is the
///   `k`-th of them in `@binding` order. The output (and input 0 of an in-place entry
///   point) must be `read_write`.
///
/// Tensors are dense `f32`. A kernel that uses `f16` registers on a device created
/// with `wgpu::Features::SHADER_F16`, and is refused elsewhere
/// ([`crate::exec::RegisterError::MissingFeature`]).
///
/// Defaults: the grid comes from the entry point's reflected `@workgroup_size`, one
/// invocation per output element ([`UserOp::workgroups`] says how); no parameter block
/// unless the WGSL declares one; no shape check beyond "every tensor is dense f32"; no
/// CPU reference; no in-place entry point.
#[derive(Clone)]
pub struct UserOp {
    pub(crate) name: String,
    pub(crate) source: String,
    pub(crate) entry: String,
    pub(crate) inputs: usize,
    pub(crate) bindings: Vec<Bind>,
    pub(crate) inplace: Option<(String, Vec<Bind>)>,
    pub(crate) check: Option<ShapeCheck>,
    pub(crate) grid: Option<GridFn>,
    pub(crate) covers: bool,
    pub(crate) params: Option<ParamsBlock>,
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
            .field("grid", &self.grid.is_some())
            .field("params", &self.params.as_ref().map(|p| p.size))
            .field("cpu", &self.cpu.is_some())
            .finish_non_exhaustive()
    }
}

impl UserOp {
    /// An op named `name` (what graph nodes write as their op) taking `inputs` inputs,
    /// run by entry point `entry` of the WGSL module `source`. Its binding map starts
    /// as `[Input(0), .., Input(inputs - 1), Output]`.
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
            grid: None,
            covers: true,
            params: None,
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

    /// Sets the out-of-place binding map: entry `k` is the entry point's `k`-th
    /// storage binding in `@binding` order.
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

    /// Adds a shape check, run when the graph is checked (before planning in a
    /// [`crate::session::Session`], else at each run); its error becomes
    /// [`crate::exec::ExecError::BadShape`].
    pub fn check(
        mut self,
        check: impl Fn(&OpShapes) -> Result<(), ShapeError> + Send + Sync + 'static,
    ) -> UserOp {
        self.check = Some(Arc::new(check));
        self
    }

    /// Sets the workgroup grid. Without it the grid is derived from the entry point's
    /// `@workgroup_size` `(x, y, z)` and the output's shape, one invocation per output
    /// element through `@builtin(global_invocation_id)`: a 1-D workgroup covers the
    /// output's elements along x; a 2-D one puts x over the output's last dimension
    /// and y over the rest; a 3-D one x over the last, y over the one before, z over
    /// the rest. An entry point that takes no `global_invocation_id` argument needs
    /// this call (registration refuses it otherwise).
    ///
    /// Every grid is checked to launch at least one invocation per output element
    /// (else [`crate::exec::ExecError::BadShape`]) unless [`UserOp::strided`] says
    /// the kernel loops. A dimension over the device's
    /// `max_compute_workgroups_per_dimension` refuses the graph before any submit.
    pub fn workgroups(
        mut self,
        grid: impl Fn(&OpShapes) -> Result<[u64; 3], ShapeError> + Send + Sync + 'static,
    ) -> UserOp {
        self.grid = Some(Arc::new(grid));
        self
    }

    /// Says the kernel's invocations loop over several output elements each, so a
    /// grid with fewer invocations than output elements is not refused.
    pub fn strided(mut self) -> UserOp {
        self.covers = false;
        self
    }

    /// Sets the parameter block: a `Pod` value per node, written to the entry point's
    /// `var<uniform>` (whose WGSL type must have `P`'s size; checked at registration).
    pub fn params<P: Pod>(
        mut self,
        params: impl Fn(&OpShapes) -> Result<P, ShapeError> + Send + Sync + 'static,
    ) -> UserOp {
        self.params = Some(ParamsBlock {
            size: std::mem::size_of::<P>(),
            bytes: Arc::new(move |s| params(s).map(|p| bytemuck::bytes_of(&p).to_vec())),
        });
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
