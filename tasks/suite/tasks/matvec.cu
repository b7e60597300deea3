// matvec: y[M] = A[M, K] * x[K], A row-major float32.
//
// Reference (trusted): one warp per row; each lane accumulates a strided
// slice of the row in double, the 32 partial sums are added in double with
// shuffles, and the result is rounded once. (One thread per row would be
// obviously correct too, but at the benchmark shape it reads the matrix
// uncoalesced and takes far too long for a reference.) The baseline is
// cuBLAS SGEMV (the plan's `call gemv`), so this file holds only the reference.

extern "C" __global__ void matvec_ref(const float* A, const float* x, float* y, int m, int k) {
  const int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= m) return;  // whole warps leave together: row depends only on the warp
  const float* a = A + (long long)row * k;
  double acc = 0.0;
  for (int i = lane; i < k; i += 32) acc += (double)a[i] * (double)x[i];
  for (int off = 16; off > 0; off /= 2) acc += __shfl_down_sync(0xffffffffu, acc, off);
  if (lane == 0) y[row] = (float)acc;
}
