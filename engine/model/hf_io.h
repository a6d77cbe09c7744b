// Weights of a Hugging Face model directory <-> the engine's parameter shards.
//
// A directory holds config.json and either one model.safetensors or a
// model.safetensors.index.json, {"metadata": {"total_size": bytes},
// "weight_map": {tensor name: file name}}, next to the files it names. When
// both exist model.safetensors is read, as transformers does. The config is
// read separately with eng_config_load(dir/config.json) and gives the layout.
#ifndef ENG_MODEL_HF_IO_H
#define ENG_MODEL_HF_IO_H

#include <stddef.h>

#include "common/err.h"
#include "model/config.h"
#include "model/layout.h"

// Fills every tensor of lo into the caller-allocated shards (shards[s] holds
// eng_layout_shard_numel(lo, s) floats), widening BF16 and F16 exactly.
// Every tensor of the layout must be there with its exact shape and a
// floating-point dtype; a tensor the layout lacks is an error, except the
// rotary tables some checkpoints carry ("*.rotary_emb.inv_freq") and
// "lm_head.weight" when the layout ties it to the embedding (transformers
// ignores that copy too). Errors name the file and the tensor, and for shapes
// the expected and the found shape. On error the shards hold partial data.
int eng_hf_load_weights(const char *dir, const eng_layout *lo, float *const *shards, eng_err *e);

// Writes dir/config.json and the weights, creating dir (and its parents) when
// missing. Tensors are stored as BF16 (rounded to nearest even) when bf16 is
// nonzero, else as F32, in Hugging Face order (eng_layout_visit); a tied
// lm_head is not written. When max_shard_bytes is nonzero and the weights
// exceed it they are split into model-0000i-of-0000N.safetensors of at most
// max_shard_bytes each (a single larger tensor gets a file of its own) plus
// the index; otherwise they go to model.safetensors. Whichever of
// model.safetensors and the index the other form would shadow is removed.
// Every file is written atomically; config.json is written last.
int eng_hf_save(const char *dir, const eng_config *c, const eng_layout *lo,
                const float *const *shards, int bf16, size_t max_shard_bytes, eng_err *e);

#endif
