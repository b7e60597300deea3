// y[i] = alpha * x[i] + beta * z[i], float32 buffers. alpha arrives as a float, beta as a
// double, n as an unsigned int (the plan passes N:u32). Reference: one thread per element,
// beta's product in double rounded to float, then one fused multiply-add in float.
extern "C" __global__ void axpby(const float* x, const float* z, float* y, float alpha, double beta,
                                 unsigned int n) {
  const unsigned int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = __fmaf_rn(alpha, x[i], __double2float_rn(beta * (double)z[i]));
}
