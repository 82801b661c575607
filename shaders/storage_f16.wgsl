// The f16 form of storage_f32.wgsl (`exec::StorageType::F16`): tensors stored as f16,
// loaded into f32 registers, accumulated in f32 and rounded to f16 on store. Needs the
// adapter's `shader-f16` feature (wgpu::Features::SHADER_F16).
enable f16;
alias T = f16;

