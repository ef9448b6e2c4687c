//! What the kernels share: zeroed buffers filled in parallel, per-thread sums of weight
//! gradients, and the CPU feature test that picks the AVX-512 paths.

/// A zero-filled buffer of `n` values, filled by rayon's threads: with freed buffers reused
/// (`rdml::tune_allocator`) the zeroing is a real pass over memory, which `vec![0; n]` would
/// make on the calling thread alone.
pub(crate) fn zeroed<T: Default + Copy + Send + Sync>(n: usize) -> Vec<T> {
    use rayon::prelude::*;
    let mut v: Vec<T> = Vec::with_capacity(n);
    v.spare_capacity_mut()
        .par_chunks_mut(1 << 15)
        .for_each(|c| c.iter_mut().for_each(|x| _ = x.write(T::default())));
    // SAFETY: the loop above initialised all n values of the capacity.
    unsafe { v.set_len(n) };
    v
}

/// Whether this CPU has AVX-512F, which the direct convolution and 2×2 pooling kernels use.
pub fn avx512() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx512f")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// A weight gradient's sum over the batch with one accumulator of `len` values per thread:
/// `add(xs, gs, acc)` adds the images of one thread's share (`x_len` input and `g_len` gradient
/// values per image) onto `acc`; the threads' sums are then added.
pub(crate) fn sum_per_thread(
    (x, x_len): (&[f32], usize),
    (grad, g_len): (&[f32], usize),
    batch: usize,
    len: usize,
    add: impl Fn(&[f32], &[f32], &mut [f32]) + Sync,
) -> Vec<f32> {
    use rayon::prelude::*;
    let chunk = batch.div_ceil(rayon::current_num_threads().max(1)).max(1);
    x.par_chunks(chunk * x_len)
        .zip(grad.par_chunks(chunk * g_len))
        .map(|(xs, gs)| {
            let mut acc = vec![0.0f32; len];
            add(xs, gs, &mut acc);
            acc
        })
        .reduce(
            || vec![0.0f32; len],
            |mut a, b| {
                a.iter_mut().zip(&b).for_each(|(a, b)| *a += b);
                a
            },
        )
}
