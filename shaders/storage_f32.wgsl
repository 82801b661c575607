// The storage element type of the executor's float tensors, joined first in front of
// every kernel (`exec::Shader::source_for`, `exec::StorageType::F32`): kernels load
// `f32(x[i])`, compute in f32 and store `T(v)`. See storage_f16.wgsl for the f16 form.
alias T = f32;

