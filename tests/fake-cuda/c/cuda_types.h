/* The few CUDA driver types the fake driver and its test programs share,
 * written from the CUDA 12/13 headers' layouts (the fake and the programs
 * must agree on them byte for byte). */
#ifndef FAKE_CUDA_TYPES_H
#define FAKE_CUDA_TYPES_H
#include <stddef.h>

typedef unsigned long long CUdeviceptr;
typedef struct { int type; int id; } CUmemLocation;
typedef struct {
    int allocType, handleTypes;
    CUmemLocation location;
    void *win32SecurityAttributes;
    size_t maxSize;
    unsigned short usage;
    unsigned char reserved[54];
} CUmemPoolProps;
typedef struct {
    CUmemPoolProps poolProps;
    const void *accessDescs;
    size_t accessDescCount, bytesize;
    CUdeviceptr dptr;
} CUDA_MEM_ALLOC_NODE_PARAMS;

#endif
