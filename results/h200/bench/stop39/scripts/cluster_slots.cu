// How many clusters of 2 (and 4) CTAs of config 10's size (256 threads, ~223 KB of dynamic
// shared memory, one CTA a SM) the device holds at once: whether a grid of 132 CTAs in pairs
// is one wave. cudaOccupancyMaxActiveClusters on a kernel with the same resources.
#include <cstdio>
#include <cuda_runtime.h>
__global__ void __launch_bounds__(256, 1) probe(int* x) {
  extern __shared__ int s[];
  if (x) x[threadIdx.x] = s[threadIdx.x];
}
int main() {
  const size_t smem = 223288;
  if (cudaFuncSetAttribute(probe, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)) != cudaSuccess) return 1;
  int sms = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  for (int c : {1, 2, 4, 8}) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(1, 132, 1);
    cfg.blockDim = dim3(256);
    cfg.dynamicSmemBytes = smem;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = 1;
    attr[0].val.clusterDim.y = c;
    attr[0].val.clusterDim.z = 1;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    int n = -1;
    const cudaError_t e = cudaOccupancyMaxActiveClusters(&n, probe, &cfg);
    std::printf("SMs %d, cluster of %d: %d clusters at once (%d CTAs) %s\n", sms, c, n, n * c, cudaGetErrorString(e));
  }
  return 0;
}
