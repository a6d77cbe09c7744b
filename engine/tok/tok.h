// Hugging Face tokenizer.json, the byte-level BPE that Qwen2/2.5/3, Llama-3
// and GPT-2 checkpoints ship, in C: same ids as the Rust `tokenizers` package
// (tests/parity/test_tok_parity.c holds it to that on committed fixtures).
//
// The pipeline of an encode, as tokenizers runs it (DESIGN §9):
//  1. added tokens with normalized=false are cut out of the raw text
//     (leftmost-longest; lstrip/rstrip swallow the white space beside them,
//     single_word refuses a match next to a word character);
//  2. each remaining piece is normalized (NFC, NFD, NFKC, NFKD or a Sequence
//     of them; utf8proc), then added tokens with normalized=true are cut out;
//  3. the pre-tokenizers split every piece: Split (a regex, PCRE2 with UTF and
//     UCP, or a literal; five delimiter behaviours; invert), ByteLevel
//     (add_prefix_space, GPT-2's regex when use_regex);
//  4. each pre-token's bytes go through the byte-to-unicode map and BPE merges
//     by rank (ignore_merges: a pre-token that is itself in the vocabulary is
//     one token; unk_token and fuse_unk);
//  5. with add_special, the TemplateProcessing post-processor's single-sequence
//     template (e.g. a BOS) wraps the ids.
// Decoding is the ByteLevel decoder's: each token's characters mapped back to
// bytes, invalid UTF-8 in the result replaced by U+FFFD.
//
// Anything else in a tokenizer.json (a WordPiece, Unigram or WordLevel model,
// byte_fallback, dropout, a normalizer or pre-tokenizer or decoder not above)
// is refused at load, by name, never approximated.
//
// An eng_tok is immutable after load and may be shared by threads; each
// thread encodes through its own eng_tok_enc (caches and scratch).
#ifndef ENG_TOK_TOK_H
#define ENG_TOK_TOK_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "common/fs_open.h"

typedef struct eng_tok eng_tok;
typedef struct eng_tok_enc eng_tok_enc;

// Growable output of an encode: ids[i] and off[i], the byte offset in the
// encoded text where token i starts (exact wherever normalization left a
// piece unchanged; inside a piece that it changed, clamped to that piece).
typedef struct eng_tok_ids {
  int32_t *ids;
  uint32_t *off;
  size_t n, cap;
} eng_tok_ids;

// Loads path (a tokenizer.json) under the file policy fs (NULL: anywhere).
int eng_tok_load(eng_tok **out, const eng_fs *fs, const char *path, eng_err *e);
// The same from JSON text in memory; name is used in messages.
int eng_tok_parse(eng_tok **out, const char *json, size_t len, const char *name, eng_err *e);
void eng_tok_free(eng_tok *t);

// One more than the largest id the tokenizer can produce (vocabulary and
// added tokens).
int32_t eng_tok_vocab(const eng_tok *t);
// The id of a token given by its content (an added token or a vocabulary
// entry as written in tokenizer.json), or -1.
int32_t eng_tok_id(const eng_tok *t, const char *content);
// The content of added token id (e.g. "<|im_end|>"), or NULL when id is not
// an added token.
const char *eng_tok_added(const eng_tok *t, int32_t id);
// The post-processor's ids before and after the text (a BOS, ...): what
// add_special adds.
void eng_tok_template(const eng_tok *t, const int32_t **pre, int *n_pre, const int32_t **post, int *n_post);
// A digest of the tokenizer.json bytes (FNV-1a 64), for caches keyed by the
// tokenizer that made them.
uint64_t eng_tok_hash(const eng_tok *t);

int eng_tok_enc_new(eng_tok_enc **out, const eng_tok *t, eng_err *e);
void eng_tok_enc_free(eng_tok_enc *enc);

// Appends the ids of text[0..n) to out. The text must be valid UTF-8
// (ENG_EINVAL naming the first bad byte's offset otherwise; see
// eng_tok_utf8_repair). add_special applies the post-processor's template.
int eng_tok_encode(eng_tok_enc *enc, const char *text, size_t n, int add_special, eng_tok_ids *out, eng_err *e);

// The text of ids as malloc'd, NUL-terminated UTF-8 (*len bytes without the
// NUL). skip_special leaves out special added tokens. Unknown ids are left
// out, as tokenizers does.
int eng_tok_decode(const eng_tok *t, const int32_t *ids, size_t n, int skip_special, char **text, size_t *len,
                   eng_err *e);

// Length of the valid UTF-8 prefix of s[0..n): n when all of it is valid.
size_t eng_tok_utf8_valid(const char *s, size_t n);
// s[0..n) with every ill-formed subsequence replaced by U+FFFD, one per
// maximal subpart (what Python's bytes.decode("utf-8", "replace") and Rust's
// String::from_utf8_lossy do): malloc'd, NUL-terminated, *len without it.
int eng_tok_utf8_repair(const char *s, size_t n, char **out, size_t *len, eng_err *e);

// Appends one id (at byte offset off); 0 or ENG_ENOMEM.
int eng_tok_ids_push(eng_tok_ids *v, int32_t id, uint32_t off);
void eng_tok_ids_free(eng_tok_ids *v);

#endif
