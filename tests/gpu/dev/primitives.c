// Costs of the primitives a record is made of, on this machine (run by
// primitives.sh, which builds primitives_tls.c as the shared library).
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <fcntl.h>
#include <unistd.h>
#include <sys/mman.h>
#include <x86intrin.h>
#include <stdatomic.h>
unsigned long tls_bump(void); // in primitives_tls.c, built as a shared library
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec*1e9+t.tv_nsec;}
#define N 5000000
static volatile uint64_t sink;
int main(){
  double t0,t1; struct timespec ts; uint64_t acc=0;
  for(int rep=0;rep<3;rep++){
  t0=now(); for(int i=0;i<N;i++){clock_gettime(CLOCK_MONOTONIC,&ts);acc+=ts.tv_nsec;} t1=now();
  printf("clock_gettime_monotonic_ns %.1f\n",(t1-t0)/N);
  t0=now(); for(int i=0;i<N;i++){clock_gettime(CLOCK_MONOTONIC_COARSE,&ts);acc+=ts.tv_nsec;} t1=now();
  printf("clock_gettime_coarse_ns %.1f\n",(t1-t0)/N);
  t0=now(); for(int i=0;i<N;i++){acc+=__rdtsc();} t1=now();
  printf("rdtsc_ns %.1f\n",(t1-t0)/N);
  unsigned aux; t0=now(); for(int i=0;i<N;i++){acc+=__rdtscp(&aux);} t1=now();
  printf("rdtscp_ns %.1f\n",(t1-t0)/N);
  t0=now(); for(int i=0;i<N;i++){acc+=tls_bump();} t1=now();
  printf("tls_gd_call_ns %.1f\n",(t1-t0)/N);
  static _Atomic uint64_t ctr; t0=now(); for(int i=0;i<N;i++){acc+=atomic_fetch_add_explicit(&ctr,1,memory_order_relaxed);} t1=now();
  printf("lock_xadd_ns %.1f\n",(t1-t0)/N);
  }
  // records into a shared file mapping, with the cache polluted between records
  char path[]="/tmp/primXXXXXX"; int fd=mkstemp(path); unlink(path);
  size_t recs=16384, sz=recs*72; if (ftruncate(fd,sz)) return 1;
  uint64_t *map=mmap(0,sz,PROT_READ|PROT_WRITE,MAP_SHARED,fd,0);
  madvise(map,sz,23/*MADV_POPULATE_WRITE*/);
  size_t pol=32<<20; char*junk=malloc(pol); memset(junk,1,pol);
  for(int pf=0;pf<2;pf++) for(int polsz=0;polsz<3;polsz++){
    size_t walk = polsz==0?0:(polsz==1?(256<<10):(32<<20));
    uint64_t cyc=0, n=0; unsigned long seq=0;
    for(int pass=0;pass<2;pass++){ memset(map,0,sz);
    for(size_t r=0;r<recs;r++){
      for(size_t j=0;j<walk;j+=64) acc+=junk[j];
      uint64_t a=__rdtsc();
      uint64_t *w=map+r*9;
      clock_gettime(CLOCK_MONOTONIC,&ts);
      for(int k=1;k<9;k++) ((volatile uint64_t*)w)[k]=ts.tv_nsec+k;
      atomic_store_explicit((_Atomic uint64_t*)w, ++seq, memory_order_release);
      if(pf && r+1<recs){ _mm_prefetch((char*)(w+9),_MM_HINT_T0); _mm_prefetch((char*)(w+17)+7,_MM_HINT_T0);}
      uint64_t b=__rdtsc(); cyc+=b-a; n++;
      if (walk==(32<<20) && r>2000) break;
    }}
    printf("record_write_cycles prefetch=%d pollute_bytes=%zu %.1f\n",pf,walk,(double)cyc/n);
  }
  // tsc frequency
  uint64_t c0=__rdtsc(); double n0=now(); usleep(200000); uint64_t c1=__rdtsc(); double n1=now();
  printf("tsc_ghz %.3f\n",(c1-c0)/(n1-n0));
  sink=acc; return 0;
}
