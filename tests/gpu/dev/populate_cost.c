// What making a spool chunk's pages costs on this machine's file systems:
// a fresh place (fallocate, map, MADV_POPULATE_WRITE), one another process
// populated first, and one punched and reserved again; per chunk and per
// record. Usage: populate_cost DIR (e.g. /tmp, /dev/shm).
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <fcntl.h>
#include <unistd.h>
#include <time.h>
#include <sys/mman.h>
#include <sys/wait.h>
static double now(void){struct timespec t;clock_gettime(CLOCK_MONOTONIC,&t);return t.tv_sec*1e9+t.tv_nsec;}
#define CH (16384*72)
int main(int argc,char**argv){
  const char*dir=argc>1?argv[1]:"/tmp"; char path[256]; snprintf(path,256,"%s/popuXXXXXX",dir);
  int fd=mkstemp(path); unlink(path); int n=16;
  // fresh: fallocate + map + populate in this process
  double t0=now();
  for(int i=0;i<n;i++){ fallocate(fd,0,(off_t)i*CH,CH); void*m=mmap(0,CH,PROT_READ|PROT_WRITE,MAP_SHARED,fd,(off_t)i*CH); madvise(m,CH,23); ((char*)m)[5]=1; }
  double t1=now(); printf("%s fresh populate per chunk %.0f us (%.1f ns/record)\n",dir,(t1-t0)/n/1000,(t1-t0)/n/16384);
  // pre-populated by another process
  if(fork()==0){ for(int i=n;i<2*n;i++){ fallocate(fd,0,(off_t)i*CH,CH); void*m=mmap(0,CH,PROT_READ|PROT_WRITE,MAP_SHARED,fd,(off_t)i*CH); madvise(m,CH,23);} _exit(0);} wait(0);
  t0=now();
  for(int i=n;i<2*n;i++){ fallocate(fd,0,(off_t)i*CH,CH); void*m=mmap(0,CH,PROT_READ|PROT_WRITE,MAP_SHARED,fd,(off_t)i*CH); madvise(m,CH,23); ((char*)m)[5]=1;}
  t1=now(); printf("%s prepopulated elsewhere, per chunk %.0f us (%.1f ns/record)\n",dir,(t1-t0)/n/1000,(t1-t0)/n/16384);
  // punched and reused
  fallocate(fd,FALLOC_FL_PUNCH_HOLE|FALLOC_FL_KEEP_SIZE,0,(off_t)n*CH);
  t0=now();
  for(int i=0;i<n;i++){ fallocate(fd,0,(off_t)i*CH,CH); void*m=mmap(0,CH,PROT_READ|PROT_WRITE,MAP_SHARED,fd,(off_t)i*CH); madvise(m,CH,23); ((char*)m)[5]=1;}
  t1=now(); printf("%s after punch, per chunk %.0f us (%.1f ns/record)\n",dir,(t1-t0)/n/1000,(t1-t0)/n/16384);
  return 0;}
