// Matrix-vector products for decode-shaped matmuls (one row, or a few, against a
// weight matrix [k, n]): memory-bound, so the kernel is shaped around streaming the
// weights once.
//   matvec:             out[m, n] = epilogue(a[m, k] x b[k, n])
//   matvec_acc:         out[m, n] += a x b                 (the residual in place)
//   matvec_acc_to:      out[m, n] = res[m, n] + a x b
//   matvec_bias:        out[m, n] = epilogue(a x b + bias[n])   (bias bound as `res`)
//   matvec_acc_bias:    out[m, n] += a x b + bias[n]             (bias bound as `res`)
//   matvec_acc_to_bias: out[m, n] = res[m, n] + a x b + bias[n]
//   matvec_norm_bias:   out[m, n] = epilogue(layer_norm(a) x b + bias[n])  (bias bound as
//                       `res`, the norm's gain as `bias5`, its beta as `beta6`; k a
//                       multiple of 4): matmul_norm.wgsl's op for a few rows
// Each invocation owns VECS = 4 adjacent vec4 columns (16 columns, 64 contiguous bytes
// of f32 weights per row of b) of one output row (workgroup y is the row); a workgroup
// of LANES invocations covers 16 * LANES adjacent columns, so per row of b the
// workgroup reads one contiguous span and each invocation a whole cache line. Per step
// along k: one element of the input row (the same address for the whole workgroup),
// four vec4 loads of b, four vec4 multiply-adds into four accumulators.
// Measured on lavapipe (examples/kernel_lab.rs), 16 columns per invocation ran 3-7x
// faster than one vec4 per invocation (the tiled kernel's layout with one row), and
// staging the input row in workgroup memory ran 2-3x slower (a barrier on llvmpipe
// switches between the workgroup's invocations), so the row is read where it lies.
// k is any; n a multiple of 4 (vec4 columns); columns past n read the last vec4 column
// and are not stored. Params: m, k, n, epilogue (0 none, 1 GELU).
// Split over k (SPLIT > 1, a power of two, the workgroup's y size): the workgroup's
// SPLIT rows of invocations each walk every SPLIT-th row of b for the same columns,
// then add their partial sums in workgroup memory (a tree). A narrower workgroup
// (LANES 4 or 1: 64 or 16 columns) split further (SPLIT 64 or 256) gives a small
// output more workgroups. A GPU that runs thousands of invocations at once
// needs it: with SPLIT = 1 a 768-column output is 48 invocations walking all of k
// (measured on an H200: 1-3% of the copy bandwidth). The sums are added in another
// order than with SPLIT = 1, so results differ by rounding.

struct Params {
    m: u32,
    k: u32,
    n: u32,
    epilogue: u32,
    eps: f32, // the layer norm's (matvec_norm_bias)
    unused2: f32,
    unused3: f32,
    unused4: f32,
}

@group(0) @binding(1) var<storage, read_write> a: array<T>;
@group(0) @binding(2) var<storage, read_write> b: array<vec4<T>>;
@group(0) @binding(3) var<storage, read_write> out: array<vec4<T>>;
@group(0) @binding(4) var<storage, read_write> res: array<vec4<T>>;
@group(0) @binding(5) var<storage, read_write> bias5: array<vec4<T>>;
@group(0) @binding(6) var<storage, read_write> beta6: array<vec4<T>>;

override LANES: u32 = 16u; // invocations along the columns (the workgroup's x size)
override SPLIT: u32 = 1u; // slices of k (the workgroup's y size); LANES * SPLIT <= MAX_LANES
const VECS: u32 = 4u; // vec4 columns per invocation
const MAX_LANES: u32 = 256u;

// Per-invocation partial sums of the layer norm's statistics (matvec_norm_bias).
var<workgroup> partial: array<f32, MAX_LANES>;
// Per-slice partial products of one vec4 column per lane (SPLIT > 1).
var<workgroup> slices: array<vec4<f32>, MAX_LANES>;

// GELU, tanh approximation (as unary.wgsl).
fn gelu(x: vec4<f32>) -> vec4<f32> {
    let c = 0.7978845608028654; // sqrt(2 / pi)
    let inner = clamp(c * (x + 0.044715 * x * x * x), vec4(-15.0), vec4(15.0));
    return 0.5 * x * (1.0 + tanh(inner));
}

// a[row, :] x b[:, 4 * g0 .. 4 * g0 + 16]: the invocation's four vec4 columns from
// vec4 column g0 (columns past n read the last one).
// Slice `slice` of SPLIT walks rows slice, slice + SPLIT, ... of b.
fn dot_columns(row: u32, g0: u32, slice: u32) -> array<vec4<f32>, VECS> {
    let n4 = params.n / 4u;
    let last = n4 - 1u;
    let c0 = min(g0, last);
    let c1 = min(g0 + 1u, last);
    let c2 = min(g0 + 2u, last);
    let c3 = min(g0 + 3u, last);
    let xrow = min(row, params.m - 1u) * params.k;
    var acc0 = vec4<f32>(0.0);
    var acc1 = vec4<f32>(0.0);
    var acc2 = vec4<f32>(0.0);
    var acc3 = vec4<f32>(0.0);
    for (var kk = slice; kk < params.k; kk += SPLIT) {
        let x = vec4(f32(a[xrow + kk]));
        let base = kk * n4;
        acc0 = fma(x, vec4<f32>(b[base + c0]), acc0);
        acc1 = fma(x, vec4<f32>(b[base + c1]), acc1);
        acc2 = fma(x, vec4<f32>(b[base + c2]), acc2);
        acc3 = fma(x, vec4<f32>(b[base + c3]), acc3);
    }
    return array<vec4<f32>, VECS>(acc0, acc1, acc2, acc3);
}

// The sums over the SPLIT slices of each invocation's VECS columns, complete in slice
// 0's invocations (the others' are partial): a tree, halving the live slices each
// round (SPLIT is a power of two), so a wide split costs log2(SPLIT) rounds rather
// than SPLIT reads in one invocation. Every invocation calls it: it holds barriers
// when SPLIT > 1.
fn add_slices(acc: array<vec4<f32>, VECS>, lane: u32, slice: u32) -> array<vec4<f32>, VECS> {
    if SPLIT == 1u {
        return acc;
    }
    var total = acc;
    for (var j = 0u; j < VECS; j++) {
        workgroupBarrier();
        slices[slice * LANES + lane] = acc[j];
        for (var half = SPLIT / 2u; half > 0u; half = half / 2u) {
            workgroupBarrier();
            if slice < half {
                slices[slice * LANES + lane] += slices[(slice + half) * LANES + lane];
            }
        }
        // Slice 0 wrote its own entry last: no barrier before it reads it.
        if slice == 0u {
            total[j] = slices[lane];
        }
    }
    return total;
}

@compute @workgroup_size(LANES, SPLIT)
fn matvec(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(local_invocation_id) lid: vec3<u32>,
) {
    let row = wid.y;
    let g0 = (wid.x * LANES + lid.x) * VECS;
    let acc = add_slices(dot_columns(row, g0, lid.y), lid.x, lid.y);
    let n4 = params.n / 4u;
    if row >= params.m || lid.y != 0u {
        return;
    }
    for (var j = 0u; j < VECS; j++) {
        let c = g0 + j;
        if c < n4 {
            let i = row * n4 + c;
            var v = acc[j];
            if params.epilogue == 1u {
                v = gelu(v);
            }
            out[i] = vec4<T>(v);
        }
    }
}

@compute @workgroup_size(LANES, SPLIT)
fn matvec_acc(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(local_invocation_id) lid: vec3<u32>,
) {
    let row = wid.y;
    let g0 = (wid.x * LANES + lid.x) * VECS;
    let acc = add_slices(dot_columns(row, g0, lid.y), lid.x, lid.y);
    let n4 = params.n / 4u;
    if row >= params.m || lid.y != 0u {
        return;
    }
    for (var j = 0u; j < VECS; j++) {
        let c = g0 + j;
        if c < n4 {
            let i = row * n4 + c;
            out[i] = vec4<T>(vec4<f32>(out[i]) + acc[j]);
        }
    }
}

@compute @workgroup_size(LANES, SPLIT)
fn matvec_acc_to(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(local_invocation_id) lid: vec3<u32>,
) {
    let row = wid.y;
    let g0 = (wid.x * LANES + lid.x) * VECS;
    let acc = add_slices(dot_columns(row, g0, lid.y), lid.x, lid.y);
    let n4 = params.n / 4u;
    if row >= params.m || lid.y != 0u {
        return;
    }
    for (var j = 0u; j < VECS; j++) {
        let c = g0 + j;
        if c < n4 {
            let i = row * n4 + c;
            out[i] = vec4<T>(vec4<f32>(res[i]) + acc[j]);
        }
    }
}

@compute @workgroup_size(LANES, SPLIT)
fn matvec_bias(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(local_invocation_id) lid: vec3<u32>,
) {
    let row = wid.y;
    let g0 = (wid.x * LANES + lid.x) * VECS;
    let acc = add_slices(dot_columns(row, g0, lid.y), lid.x, lid.y);
    let n4 = params.n / 4u;
    if row >= params.m || lid.y != 0u {
        return;
    }
    for (var j = 0u; j < VECS; j++) {
        let c = g0 + j;
        if c < n4 {
            let i = row * n4 + c;
            var v = acc[j] + vec4<f32>(res[c]);
            if params.epilogue == 1u {
                v = gelu(v);
            }
            out[i] = vec4<T>(v);
        }
    }
}

@compute @workgroup_size(LANES, SPLIT)
fn matvec_acc_bias(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(local_invocation_id) lid: vec3<u32>,
) {
    let row = wid.y;
    let g0 = (wid.x * LANES + lid.x) * VECS;
    let acc = add_slices(dot_columns(row, g0, lid.y), lid.x, lid.y);
    let n4 = params.n / 4u;
    if row >= params.m || lid.y != 0u {
        return;
    }
    for (var j = 0u; j < VECS; j++) {
        let c = g0 + j;
        if c < n4 {
            let i = row * n4 + c;
            out[i] = vec4<T>(vec4<f32>(out[i]) + (acc[j] + vec4<f32>(res[c])));
        }
    }
}

@compute @workgroup_size(LANES, SPLIT)
fn matvec_acc_to_bias(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(local_invocation_id) lid: vec3<u32>,
) {
    let row = wid.y;
    let g0 = (wid.x * LANES + lid.x) * VECS;
    let acc = add_slices(dot_columns(row, g0, lid.y), lid.x, lid.y);
    let n4 = params.n / 4u;
    if row >= params.m || lid.y != 0u {
        return;
    }
    for (var j = 0u; j < VECS; j++) {
        let c = g0 + j;
        if c < n4 {
            let i = row * n4 + c;
            out[i] = vec4<T>(vec4<f32>(res[i]) + (acc[j] + vec4<f32>(bias5[c])));
        }
    }
}

// The sum of the workgroup's `v` (`flat` is the invocation's index in the workgroup),
// returned to every invocation (it holds barriers: every invocation calls it). A tree
// over the LANES * SPLIT partial sums (a power of two): log2 of them rounds, where one
// invocation adding them all would read each.
fn workgroup_sum(v: f32, flat: u32) -> f32 {
    workgroupBarrier();
    partial[flat] = v;
    for (var half = LANES * SPLIT / 2u; half > 0u; half = half / 2u) {
        workgroupBarrier();
        if flat < half {
            partial[flat] += partial[flat + half];
        }
    }
    workgroupBarrier();
    return partial[0];
}

@compute @workgroup_size(LANES, SPLIT)
fn matvec_norm_bias(
    @builtin(workgroup_id) wid: vec3<u32>,
    @builtin(local_invocation_id) lid: vec3<u32>,
) {
    let row = wid.y;
    let lane = lid.x;
    let flat = lid.y * LANES + lane;
    let k = params.k;
    let xrow = min(row, params.m - 1u) * k;
    // Mean, then the two-pass variance (as norm.wgsl), each invocation a stride of the row.
    var s = 0.0;
    for (var i = flat; i < k; i += LANES * SPLIT) {
        s = s + f32(a[xrow + i]);
    }
    let mean = workgroup_sum(s, flat) / f32(k);
    var q = 0.0;
    for (var i = flat; i < k; i += LANES * SPLIT) {
        let d = f32(a[xrow + i]) - mean;
        q = q + d * d;
    }
    let inv = inverseSqrt(workgroup_sum(q, flat) / f32(k) + params.eps);
    let n4 = params.n / 4u;
    let g0 = (wid.x * LANES + lane) * VECS;
    let last = n4 - 1u;
    let c0 = min(g0, last);
    let c1 = min(g0 + 1u, last);
    let c2 = min(g0 + 2u, last);
    let c3 = min(g0 + 3u, last);
    var acc0 = vec4<f32>(0.0);
    var acc1 = vec4<f32>(0.0);
    var acc2 = vec4<f32>(0.0);
    var acc3 = vec4<f32>(0.0);
    for (var kq = lid.y; kq < k / 4u; kq += SPLIT) {
        let kk = kq * 4u;
        let xv = vec4<f32>(
            f32(a[xrow + kk]),
            f32(a[xrow + kk + 1u]),
            f32(a[xrow + kk + 2u]),
            f32(a[xrow + kk + 3u]),
        );
        let xn = (xv - mean) * inv * vec4<f32>(bias5[kq]) + vec4<f32>(beta6[kq]);
        for (var j = 0u; j < 4u; j++) {
            let x = vec4(xn[j]);
            let base = (kk + j) * n4;
            acc0 = fma(x, vec4<f32>(b[base + c0]), acc0);
            acc1 = fma(x, vec4<f32>(b[base + c1]), acc1);
            acc2 = fma(x, vec4<f32>(b[base + c2]), acc2);
            acc3 = fma(x, vec4<f32>(b[base + c3]), acc3);
        }
    }
    let acc = add_slices(array<vec4<f32>, VECS>(acc0, acc1, acc2, acc3), lane, lid.y);
    if row >= params.m || lid.y != 0u {
        return;
    }
    for (var j = 0u; j < VECS; j++) {
        let c = g0 + j;
        if c < n4 {
            var v = acc[j] + vec4<f32>(res[c]);
            if params.epilogue == 1u {
                v = gelu(v);
            }
            out[row * n4 + c] = vec4<T>(v);
        }
    }
}
