// The safetensors file format: an 8-byte little-endian header length N, N
// bytes of JSON {name: {"dtype", "shape", "data_offsets": [begin, end]},
// "__metadata__": {string: string}}, then the data section, where every tensor
// occupies bytes [begin, end) stored little-endian and row-major.
//
// The reader validates the whole header at open, as the reference
// implementation does: known dtype, non-negative shape, offsets whose length is
// shape x dtype size, tensors that neither overlap nor leave holes and that end
// exactly at the end of the file. Every error names the file and the tensor or
// field at fault (ENG_EINVAL for malformed content, ENG_ENOTSUP for a valid
// dtype the engine does not read, ENG_EIO when the file cannot be read).
#ifndef ENG_MODEL_SAFETENSORS_H
#define ENG_MODEL_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "common/fs_open.h"

#define ENG_ST_MAX_DIMS 8

typedef enum { ENG_ST_F32, ENG_ST_BF16, ENG_ST_F16, ENG_ST_I32, ENG_ST_I64 } eng_st_dtype;

// "F32", "BF16", ... as spelled in the header.
const char *eng_st_dtype_name(eng_st_dtype d);

// Bytes per element.
size_t eng_st_dtype_size(eng_st_dtype d);

typedef struct eng_st_tensor {
  const char *name; // owned by the eng_st_file
  eng_st_dtype dtype;
  int ndim; // 0 for a scalar
  int64_t shape[ENG_ST_MAX_DIMS];
  size_t numel;      // product of shape (1 for a scalar)
  size_t begin, end; // byte range inside the data section
} eng_st_tensor;

struct json_t;

// An open file. Fields are read-only to callers. Tensors are read with
// pread, not through a mapping: a file truncated under a reader then fails
// that read with an error naming it, where a mapping would be SIGBUS.
typedef struct eng_st_file {
  char *path;                // copy of the path, for messages; NULL when nothing is open
  int fd;
  size_t size;               // file bytes when opened
  size_t data_off;           // where the data section starts
  size_t data_size;
  int n_tensors;
  eng_st_tensor *tensors; // in data order (ascending begin)
  struct json_t *header;  // parsed header; tensor names point into it
} eng_st_file;

// Opens and validates path, opened under fs (common/fs_open.h; NULL:
// anywhere). On failure f holds nothing to close.
int eng_st_open(eng_st_file *f, const eng_fs *fs, const char *path, eng_err *e);

// Releases everything; safe on a zeroed or already closed f.
void eng_st_close(eng_st_file *f);

// The tensor called name, or NULL.
const eng_st_tensor *eng_st_find(const eng_st_file *f, const char *name);

// Converts a F32, BF16 or F16 tensor to numel floats in out. Both half
// formats widen exactly (subnormals, infinities and NaN included). Another
// dtype is an error naming the tensor.
int eng_st_read_f32(const eng_st_file *f, const eng_st_tensor *t, float *out, eng_err *e);

// Copies an I32 tensor, or narrows an I64 one (an element outside int32 is an
// error naming the tensor and the element), into numel int32 in out.
int eng_st_read_i32(const eng_st_file *f, const eng_st_tensor *t, int32_t *out, eng_err *e);

// One tensor to write. The source is float for F32 and BF16 (rounded to
// nearest, ties to even; NaN stays NaN), int32_t for I32.
typedef struct eng_st_src {
  const char *name;
  eng_st_dtype dtype; // F32, BF16 or I32
  int ndim;
  int64_t shape[ENG_ST_MAX_DIMS];
  const void *data; // numel elements, borrowed
  // Instead of data: tensor from_t of the open file from, copied byte for
  // byte (in whichever dtype it has; dtype and shape are taken from it).
  const struct eng_st_file *from;
  const eng_st_tensor *from_t;
} eng_st_src;

// A source that copies tensor t of open file f as it is.
eng_st_src eng_st_src_copy(const struct eng_st_file *f, const eng_st_tensor *t);

// Writes n tensors, in the given order, to path atomically (path.tmp, fsync,
// rename, fsync of the directory) with "__metadata__": {"format": "pt"},
// which transformers expects. The header is padded with spaces to a multiple
// of 8 bytes so that every tensor starts 8-byte aligned.
int eng_st_write(const char *path, const eng_st_src *t, int n, eng_err *e);

// Bytes the data of t occupies in a file (numel x dtype size).
size_t eng_st_src_nbytes(const eng_st_src *t);

#endif
