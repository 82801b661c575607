// An engine's own kernels, plain WGSL: each entry point declares what it binds (its
// parameter block, if any, and its buffers with the access it needs). wgalloc joins
// nothing in front and binds by reflection: entry k of an op's binding map is the
// entry point's k-th storage buffer in @binding order.

struct Dims {
    m: u32,
    k: u32,
    n: u32,
    pad: u32,
}

@group(0) @binding(0) var<uniform> dims: Dims;
@group(0) @binding(1) var<storage, read> a: array<f32>;
@group(0) @binding(2) var<storage, read> b: array<f32>;
@group(0) @binding(3) var<storage, read_write> c: array<f32>;

// c[m, n] = a[m, k] · b[k, n]: one invocation per element of c, x over its columns
// and y over its rows, as wgalloc's default grid for a 2-D @workgroup_size lays out.
@compute @workgroup_size(16, 16)
fn matmul(@builtin(global_invocation_id) id: vec3<u32>) {
    if id.x >= dims.n || id.y >= dims.m {
        return;
    }
    var sum = 0.0;
    for (var i = 0u; i < dims.k; i++) {
        sum += a[id.y * dims.k + i] * b[i * dims.n + id.x];
    }
    c[id.y * dims.n + id.x] = sum;
}

@group(0) @binding(4) var<storage, read_write> x: array<f32>;
@group(0) @binding(5) var<storage, read> r: array<f32>;
@group(0) @binding(6) var<storage, read_write> y: array<f32>;

// y = max(x, 0); no parameter block: the bound sizes say how long the tensors are.
@compute @workgroup_size(64)
fn relu(@builtin(global_invocation_id) id: vec3<u32>) {
    if id.x < arrayLength(&y) {
        y[id.x] = max(x[id.x], 0.0);
    }
}

// x = max(x, 0), in place.
@compute @workgroup_size(64)
fn relu_inplace(@builtin(global_invocation_id) id: vec3<u32>) {
    if id.x < arrayLength(&x) {
        x[id.x] = max(x[id.x], 0.0);
    }
}

// y = x + r.
@compute @workgroup_size(64)
fn add(@builtin(global_invocation_id) id: vec3<u32>) {
    if id.x < arrayLength(&y) {
        y[id.x] = x[id.x] + r[id.x];
    }
}

// x = x + r, in place.
@compute @workgroup_size(64)
fn add_inplace(@builtin(global_invocation_id) id: vec3<u32>) {
    if id.x < arrayLength(&x) {
        x[id.x] = x[id.x] + r[id.x];
    }
}
