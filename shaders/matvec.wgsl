// Matrix-vector products for decode-shaped matmuls (one row, or a few, against a
// weight matrix): memory-bound, so the kernel is shaped around reading the weights once.
//   matvec:             out[m, n] = epilogue(a[m, k] x b[k, n])
//   matvec_acc:         out[m, n] += a x b                 (the residual in place)
//   matvec_acc_to:      out[m, n] = res[m, n] + a x b
//   matvec_bias:        out[m, n] = epilogue(a x b + bias[n])   (bias bound as `res`)
//   matvec_acc_bias:    out[m, n] += a x b + bias[n]             (bias bound as `res`)
//   matvec_acc_to_bias: out[m, n] = res[m, n] + a x b + bias[n]
// Each invocation owns 4 adjacent output columns of one row (workgroup y is the row); a
// workgroup of LANES invocations covers 4 * LANES columns, so neighbouring invocations
// read neighbouring weights of the same row of b (coalesced). The row of `a` is staged
// in workgroup memory CHUNK elements at a time and read from there by every invocation.
// Any m, k and n: columns past n read the last column and are not stored; steps past k
// multiply a staged zero. Along k the sums nest in groups of four exactly as
// matmul_tiled.wgsl's do, so for k a multiple of 4 both kernels give the same bits.
// Params: m, k, n, epilogue (0 none, 1 GELU).

struct Params {
    m: u32,
    k: u32,
    n: u32,
    epilogue: u32,
    unused1: f32,
    unused2: f32,
    unused3: f32,
    unused4: f32,
}

@group(0) @binding(1) var<storage, read_write> a: array<T>;
@group(0) @binding(2) var<storage, read_write> b: array<T>;
@group(0) @binding(3) var<storage, read_write> out: array<T>;
@group(0) @binding(4) var<storage, read_write> res: array<T>;
@group(0) @binding(5) var<storage, read_write> bias5: array<T>;

override LANES: u32 = 16u; // invocations per workgroup
const CHUNK: u32 = 256u; // elements of the input row staged per step (a multiple of 4)

var<workgroup> xs: array<f32, CHUNK>;

// GELU, tanh approximation (as unary.wgsl).
fn gelu(x: vec4<f32>) -> vec4<f32> {
    let c = 0.7978845608028654; // sqrt(2 / pi)
    let inner = clamp(c * (x + 0.044715 * x * x * x), vec4(-15.0), vec4(15.0));
    return 0.5 * x * (1.0 + tanh(inner));
}

// The four columns an invocation starting at c0 reads (clamped to the last column).
fn columns(c0: u32) -> vec4<u32> {
    return min(vec4<u32>(c0, c0 + 1u, c0 + 2u, c0 + 3u), vec4<u32>(params.n - 1u));
}

// Row kk of b at `cols`.
fn weights(kk: u32, cols: vec4<u32>) -> vec4<f32> {
    let base = min(kk, params.k - 1u) * params.n;
    return vec4<f32>(
        f32(b[base + cols.x]),
        f32(b[base + cols.y]),
        f32(b[base + cols.z]),
        f32(b[base + cols.w]),
    );
}

// a[row, :] x b[:, cols], for the invocation `lid` of the workgroup. Called from
// uniform control flow (it has barriers).
fn dot_columns(row: u32, cols: vec4<u32>, lid: u32) -> vec4<f32> {
    let k = params.k;
    let xrow = min(row, params.m - 1u) * k;
    var acc = vec4<f32>(0.0);
    for (var k0 = 0u; k0 < k; k0 += CHUNK) {
        workgroupBarrier();
        for (var i = lid; i < CHUNK; i += LANES) {
            var v = 0.0;
            if k0 + i < k {
                v = f32(a[xrow + k0 + i]);
            }
            xs[i] = v;
        }
        workgroupBarrier();
        let steps = min(CHUNK, k - k0);
        for (var i = 0u; i < steps; i += 4u) {
            let kk = k0 + i;
            let b0 = weights(kk, cols);
            let b1 = weights(kk + 1u, cols);
            let b2 = weights(kk + 2u, cols);
            let b3 = weights(kk + 3u, cols);
            acc = fma(vec4(xs[i]), b0, fma(vec4(xs[i + 1u]), b1, fma(vec4(xs[i + 2u]), b2, fma(vec4(xs[i + 3u]), b3, acc))));
        }
    }
    return acc;
}

// Stores the columns c0.. of `v` that lie in the row.
fn store(row: u32, c0: u32, v: vec4<f32>) {
    let base = row * params.n;
    for (var j = 0u; j < 4u; j++) {
        if c0 + j < params.n {
            out[base + c0 + j] = T(v[j]);
        }
    }
}

// `res` at the four columns `cols` of row `row` (the bias: row 0).
fn res4(row: u32, cols: vec4<u32>) -> vec4<f32> {
    let base = row * params.n;
    return vec4<f32>(
        f32(res[base + cols.x]),
        f32(res[base + cols.y]),
        f32(res[base + cols.z]),
        f32(res[base + cols.w]),
    );
}

// `out` at the four columns `cols` of row `row`.
fn out4(row: u32, cols: vec4<u32>) -> vec4<f32> {
    let base = row * params.n;
    return vec4<f32>(
        f32(out[base + cols.x]),
        f32(out[base + cols.y]),
        f32(out[base + cols.z]),
        f32(out[base + cols.w]),
    );
}

// The bias bound as `bias5` at the four columns `cols`.
fn bias4(cols: vec4<u32>) -> vec4<f32> {
    return vec4<f32>(f32(bias5[cols.x]), f32(bias5[cols.y]), f32(bias5[cols.z]), f32(bias5[cols.w]));
}

@compute @workgroup_size(LANES)
fn matvec(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(local_invocation_id) lid: vec3<u32>,
) {
    let row = wid.y;
    let c0 = (wid.x * LANES + lid.x) * 4u;
    let cols = columns(c0);
    let acc = dot_columns(row, cols, lid.x);
    if c0 >= params.n || row >= params.m {
        return;
    }
    var v = acc;
    if params.epilogue == 1u {
        v = gelu(v);
    }
    store(row, c0, v);
}

@compute @workgroup_size(LANES)
fn matvec_acc(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(local_invocation_id) lid: vec3<u32>,
) {
    let row = wid.y;
    let c0 = (wid.x * LANES + lid.x) * 4u;
    let cols = columns(c0);
    let acc = dot_columns(row, cols, lid.x);
    if c0 >= params.n || row >= params.m {
        return;
    }
    store(row, c0, out4(row, cols) + acc);
}

@compute @workgroup_size(LANES)
fn matvec_acc_to(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(local_invocation_id) lid: vec3<u32>,
) {
    let row = wid.y;
    let c0 = (wid.x * LANES + lid.x) * 4u;
    let cols = columns(c0);
    let acc = dot_columns(row, cols, lid.x);
    if c0 >= params.n || row >= params.m {
        return;
    }
    store(row, c0, res4(row, cols) + acc);
}

@compute @workgroup_size(LANES)
fn matvec_bias(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(local_invocation_id) lid: vec3<u32>,
) {
    let row = wid.y;
    let c0 = (wid.x * LANES + lid.x) * 4u;
    let cols = columns(c0);
    let acc = dot_columns(row, cols, lid.x);
    if c0 >= params.n || row >= params.m {
        return;
    }
    var v = acc + res4(0u, cols);
    if params.epilogue == 1u {
        v = gelu(v);
    }
    store(row, c0, v);
}

@compute @workgroup_size(LANES)
fn matvec_acc_bias(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(local_invocation_id) lid: vec3<u32>,
) {
    let row = wid.y;
    let c0 = (wid.x * LANES + lid.x) * 4u;
    let cols = columns(c0);
    let acc = dot_columns(row, cols, lid.x);
    if c0 >= params.n || row >= params.m {
        return;
    }
    store(row, c0, out4(row, cols) + (acc + res4(0u, cols)));
}

@compute @workgroup_size(LANES)
fn matvec_acc_to_bias(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(local_invocation_id) lid: vec3<u32>,
) {
    let row = wid.y;
    let c0 = (wid.x * LANES + lid.x) * 4u;
    let cols = columns(c0);
    let acc = dot_columns(row, cols, lid.x);
    if c0 >= params.n || row >= params.m {
        return;
    }
    store(row, c0, res4(row, cols) + (acc + bias4(cols)));
}
