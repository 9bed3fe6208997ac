// gemv_ceiling.cu — what a kernel that reads one decode matrix once can reach on an
// NVIDIA GPU, to calibrate ssmc's Vulkan GEMVs (docs/performance.md, stop 26): a plain
// read of the matrix, a GEMV in ssmc's shape (256 threads, COLS columns a workgroup, 8
// bf16 a thread per step) and a warp-per-row one, each launched back to back on
// different copies of the weights so that none is served from L2.
//   nvcc -O3 -arch=sm_90 -std=c++17 bench/gemv_ceiling.cu -o /tmp/gemv && /tmp/gemv
#include <cstdio>
#include <cstdint>
#include <cuda_runtime.h>
__device__ __forceinline__ float lo(uint32_t u){return __uint_as_float(u<<16);}
__device__ __forceinline__ float hi(uint32_t u){return __uint_as_float(u&0xffff0000u);}
__device__ __forceinline__ float dot8(uint4 q, const float* x){
  return lo(q.x)*x[0]+hi(q.x)*x[1]+lo(q.y)*x[2]+hi(q.y)*x[3]+lo(q.z)*x[4]+hi(q.z)*x[5]+lo(q.w)*x[6]+hi(q.w)*x[7];}
// ours: 256 threads, COLS columns per block, thread covers k=lid*8+it*2048
template<int COLS,int ITERS>
__global__ void ours(const uint4* w,const float* x,float* y,int K){
  int n0=blockIdx.x*COLS; int lid=threadIdx.x;
  float xr[ITERS][8];
  for(int it=0;it<ITERS;it++){int k=lid*8+it*2048; for(int j=0;j<8;j++) xr[it][j]=x[k+j];}
  __shared__ float red[8][COLS];
  float acc[COLS];
#pragma unroll
  for(int c=0;c<COLS;c++){acc[c]=0;
#pragma unroll
    for(int it=0;it<ITERS;it++){int k=lid*8+it*2048; uint4 q=w[((size_t)(n0+c)*K+k)>>3]; acc[c]+=dot8(q,xr[it]);}}
#pragma unroll
  for(int c=0;c<COLS;c++){float s=acc[c]; for(int o=16;o;o>>=1) s+=__shfl_xor_sync(~0u,s,o); if((lid&31)==0) red[lid>>5][c]=s;}
  __syncthreads();
  if(lid<COLS){float v=0; for(int i=0;i<8;i++) v+=red[i][lid]; y[n0+lid]=v;}
}
// warp per row, U loads in flight per lane
template<int U>
__global__ void warp(const uint4* w,const float* x,float* y,int K,int N){
  int row=blockIdx.x*(blockDim.x/32)+threadIdx.x/32; int lane=threadIdx.x&31; if(row>=N) return;
  const uint4* wr=w+((size_t)row*K>>3); float acc=0;
  for(int k0=lane*8;k0<K;k0+=32*8*U){
    uint4 q[U];
#pragma unroll
    for(int u=0;u<U;u++) q[u]=wr[(k0+u*256)>>3];
#pragma unroll
    for(int u=0;u<U;u++){const float* xp=x+k0+u*256; acc+=dot8(q[u],xp);}
  }
  for(int o=16;o;o>>=1) acc+=__shfl_xor_sync(~0u,acc,o);
  if(lane==0) y[row]=acc;
}
__global__ void readbw(const uint4* w,size_t n,float* y){
  size_t i=blockIdx.x*(size_t)blockDim.x+threadIdx.x; uint32_t s=0;
  for(;i<n;i+=(size_t)gridDim.x*blockDim.x){uint4 q=w[i]; s^=q.x^q.y^q.z^q.w;}
  if(s==0x12345678) y[0]=1;
}
int main(){
  int shapes[][2]={{8192,2048},{2048,4096},{16384,4096},{4096,8192},{160,4096}};
  const int COPIES=16;
  for(auto& sh:shapes){
    int N=sh[0],K=sh[1]; size_t bytes=(size_t)N*K*2;
    int copies = bytes*COPIES > (size_t)8<<30 ? 8 : COPIES;
    uint4* w; cudaMalloc(&w,bytes*copies); cudaMemset(w,0x3c,bytes*copies);
    float *x,*y; cudaMalloc(&x,K*4); cudaMalloc(&y,N*4); cudaMemset(x,0,K*4);
    cudaEvent_t a,b; cudaEventCreate(&a); cudaEventCreate(&b);
    auto run=[&](const char* name, auto launch){
      for(int r=0;r<3;r++) launch(w);
      cudaEventRecord(a); int reps=200;
      for(int r=0;r<reps;r++) launch((const uint4*)((const char*)w+(r%copies)*bytes));
      cudaEventRecord(b); cudaEventSynchronize(b); float ms; cudaEventElapsedTime(&ms,a,b);
      double us=ms*1e3/reps; printf("N=%d K=%d %-12s %8.2f us %6.2f TB/s\n",N,K,name,us,bytes/us/1e6);};
    if(K==2048){ run("ours c8",[&](const uint4* p){ours<8,1><<<N/8,256>>>(p,x,y,K);});
                 run("ours c4",[&](const uint4* p){ours<4,1><<<N/4,256>>>(p,x,y,K);});}
    if(K==4096){ run("ours c8i2",[&](const uint4* p){ours<8,2><<<N/8,256>>>(p,x,y,K);});
                 run("ours c4i2",[&](const uint4* p){ours<4,2><<<N/4,256>>>(p,x,y,K);});}
    if(K==8192){ run("ours c4i4",[&](const uint4* p){ours<4,4><<<N/4,256>>>(p,x,y,K);});}
    run("warp u2",[&](const uint4* p){warp<2><<<(N+7)/8,256>>>(p,x,y,K,N);});
    run("warp u4",[&](const uint4* p){warp<4><<<(N+7)/8,256>>>(p,x,y,K,N);});
    if(K>=4096) run("warp u8",[&](const uint4* p){warp<8><<<(N+7)/8,256>>>(p,x,y,K,N);});
    run("read",[&](const uint4* p){readbw<<<132*16,256>>>(p,bytes/16,y);});
    cudaFree(w);cudaFree(x);cudaFree(y);
  }
}
