// Data selection by learning-dynamics signals (DESIGN §8), deterministic
// from the seed and resumable.
//
// Online batch selection: each step draws a pool of k·batch candidate
// samples from the training data in its order, scores each by a
// forward-only pass (its mean loss over its counted tokens), and trains on
// the `batch` of them with the highest score (ties: the earlier drawn):
//  - LOSS: the loss itself (hard examples);
//  - REDUCIBLE: the loss less a reference model's loss on the same sample
//    (RHO-LOSS, Mindermann et al. 2022: learnable, worth learning, not yet
//    learnt), the reference's scored once per sample;
//  - DYNAMICS: how much the sample's loss fell since it was last scored (a
//    learning-dynamics signal kept per sample: what the model is learning
//    now); samples never scored before come first, by their loss.
// The scoring passes' FLOPs count against the budget (a forward is a third
// of a training step's model FLOPs). With `adaptive`, k is the ratio of the
// training set's tokens to the tokens the remaining budget can still train
// on, between 1 (no selection) and `pool`: the smaller the budget against
// the data, the harder the selection.
//
// Offline: a scores file (one mean loss per sample of a data file, in the
// file's order, written by eng_score_data) and a percentile band of it:
// the run trains only on the samples whose score lies in the band
// (perplexity pruning, Marion et al. 2023).
#ifndef ENG_COMPUTE_SELECT_H
#define ENG_COMPUTE_SELECT_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "common/fs_open.h"

typedef enum { ENG_SELECT_NONE, ENG_SELECT_LOSS, ENG_SELECT_REDUCIBLE, ENG_SELECT_DYNAMICS } eng_select_rule;
// "none", "loss", "reducible", "dynamics"; -1 for another name.
int eng_select_rule_parse(const char *name);
const char *eng_select_rule_name(eng_select_rule r);

typedef struct eng_select {
  eng_select_rule rule;   // online batch selection (NONE: off)
  int pool;               // candidates per step, in batches (0: 4); with adaptive, the most
  int adaptive;           // k from the remaining budget (above)
  const char *reference;  // REDUCIBLE: the reference model's Hugging Face directory
  const char *band_file;  // offline: a scores file of the training data (NULL: none)
  double band_lo, band_hi; // its percentile band to train on, 0 <= lo < hi <= 100
} eng_select;

// Ranges and combinations, by field ("select.pool ..."); has_budget: the
// run has a token or FLOP budget, which adaptive needs.
int eng_select_validate(const eng_select *s, int has_budget, eng_err *e);

// The scores file: "# traind scores v1 samples N seq_len T\n" then N lines,
// one mean loss each (NAN for a sample without a counted token): its text
// (malloc'ed, *len bytes; NULL when out of memory), or written atomically.
char *eng_scores_text(const float *loss, uint64_t n, int seq_len, size_t *len);
int eng_scores_write(const char *path, const float *loss, uint64_t n, int seq_len, eng_err *e);
// Reads one, which must have n samples of seq_len (those of the data it is
// used with); *loss is malloc'ed.
int eng_scores_read(const eng_fs *fs, const char *path, uint64_t n, int seq_len, float **loss, eng_err *e);
// keep[i] = 1 for the samples whose score lies in percentiles [lo, hi] of
// the finite scores; returns how many.
uint64_t eng_scores_band(const float *loss, uint64_t n, double lo, double hi, uint8_t *keep);

// Per-sample state of online selection, indexed by the file's sample
// number: the loss when last scored (DYNAMICS) and the reference model's
// loss (REDUCIBLE), NAN where there is none yet. Travels in checkpoints.
typedef struct eng_select_state {
  uint64_t n;
  float *last, *ref;
} eng_select_state;
int eng_select_state_alloc(eng_select_state *st, uint64_t n, eng_err *e);
void eng_select_state_free(eng_select_state *st);
size_t eng_select_state_bytes(const eng_select_state *st);
void eng_select_state_pack(const eng_select_state *st, void *out);
int eng_select_state_unpack(eng_select_state *st, const void *data, size_t n, eng_err *e);

// The pool's scores by rule from its current losses `cur` (and, for the
// rules that keep them, st's per-sample values of the pool's samples, which
// this updates), then the indices of the `keep` best into pick, in pool
// order.
void eng_select_pick(eng_select_rule rule, eng_select_state *st, const uint64_t *samples, const double *cur,
                     int n, int keep, int *pick);

#endif
