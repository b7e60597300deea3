// Correct: the reference's arithmetic (beta's product in double, one fused multiply-add in
// float) with a grid-stride loop, the arguments in another order, the size as unsigned long
// long (N:u64) and three typed literals: a float scale of 1.0, a short of -2 and an unsigned
// char of 7. It checks every scalar against the values the task and the plan give (alpha =
// 0.1 rounded to float, beta = -0.3 as a double): an argument passed with the wrong width or
// bits writes nothing, and the poisoned output fails validation.
extern "C" __global__ void axpby_gs(const float* x, const float* z, double beta, float alpha, float* y,
                                    unsigned long long n, float scale, short minus_two, unsigned char tag) {
  if (alpha != 0.1f || beta != -0.3 || scale != 1.0f || minus_two != -2 || tag != 7) return;
  for (unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x; i < n;
       i += (unsigned long long)gridDim.x * blockDim.x)
    y[i] = scale * __fmaf_rn(alpha, x[i], __double2float_rn(beta * (double)z[i]));
}
