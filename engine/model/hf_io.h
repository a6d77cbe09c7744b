// Weights of a Hugging Face model directory <-> the engine's parameter shards.
//
// A directory holds config.json and either one model.safetensors or a
// model.safetensors.index.json, {"metadata": {"total_size": bytes},
// "weight_map": {tensor name: file name}}, next to the files it names. When
// both exist model.safetensors is read, as transformers does. The config is
// read separately with eng_config_load(dir/config.json) and gives the layout.
//
// Every file of a model directory is opened under a file policy fs
// (common/fs_open.h; NULL: anywhere): the directory's path must be spelled
// under one of its roots, and a link inside may not lead out of it.
#ifndef ENG_MODEL_HF_IO_H
#define ENG_MODEL_HF_IO_H

#include <stddef.h>

#include "common/err.h"
#include "model/config.h"
#include "model/layout.h"
#include "model/safetensors.h"

// The configuration of model directory dir as the engine loads it, which is
// what transformers 5 makes of it: dir/config.json (eng_config_load), except
// that a config tying the head to the embedding (tie_word_embeddings true)
// whose weights also hold an "lm_head.weight" that differs from the
// embedding is loaded untied with the file's head, as transformers does:
// c->tie_embeddings becomes 0 and *untied 1 (else 0). A stored head equal
// to the embedding, value for value as torch.equal compares, stays tied.
int eng_hf_load_config(const eng_fs *fs, const char *dir, eng_config *c, int *untied, eng_err *e);

// Whether the weights of dir hold an "lm_head.weight" that is not equal to
// their embedding, embed_name (the layout's: "model.embed_tokens.weight"),
// as eng_hf_load_config compares them; 0 when they hold no head or no embedding.
int eng_hf_head_distinct(const eng_fs *fs, const char *dir, const char *embed_name, int *distinct, eng_err *e);

// Opens the weight file of dir that holds tensor name: model.safetensors, or
// the file the index assigns it. *t is NULL when no file of dir holds it.
// After a success the caller closes f (eng_st_close), also when *t is NULL.
int eng_hf_open_tensor(const eng_fs *fs, const char *dir, const char *name, eng_st_file *f, const eng_st_tensor **t,
                       eng_err *e);

// Fills every tensor of lo into the caller-allocated shards (shards[s] holds
// eng_layout_shard_numel(lo, s) floats), widening BF16 and F16 exactly.
// Every tensor of the layout must be there with its exact shape and a
// floating-point dtype; a tensor the layout lacks is an error, except the
// rotary tables some checkpoints carry ("*.rotary_emb.inv_freq"), the
// tensors of a multimodal checkpoint that pass through (eng_layout_passes) and an
// "lm_head.weight" equal to the embedding when the layout ties the two (a
// head that differs is an error: it would be dropped; eng_hf_load_config
// gives the layout that keeps it). Errors name the file and the tensor, and
// for shapes the expected and the found shape. On error the shards hold
// partial data.
int eng_hf_load_weights(const eng_fs *fs, const char *dir, const eng_layout *lo, float *const *shards, eng_err *e);
// The same into a model's own state (model/model.h), wherever it holds each
// tensor (a bf16 base's are rounded).
typedef struct eng_model eng_model;
int eng_hf_load_model(const eng_fs *fs, const char *dir, eng_model *m, eng_err *e);

// Writes dir/config.json and the weights, creating dir (and its parents) when
// missing. Tensors are stored as BF16 (rounded to nearest even) when bf16 is
// nonzero, else as F32, in Hugging Face order (eng_layout_visit); a tied
// lm_head is not written. When max_shard_bytes is nonzero and the weights
// exceed it they are split into model-0000i-of-0000N.safetensors of at most
// max_shard_bytes each (a single larger tensor gets a file of its own) plus
// the index; otherwise they go to model.safetensors. Whichever of
// model.safetensors and the index the other form would shadow is removed.
// src_dir, when not NULL, is the model directory the weights came from: the
// token ids of its config.json (bos_token_id, eos_token_id, pad_token_id)
// go into the config.json written, and whichever of its tokenizer and
// generation files exist (tokenizer.json, tokenizer_config.json,
// special_tokens_map.json, vocab.json, merges.txt, tokenizer.model,
// added_tokens.json, generation_config.json, chat_template.jinja) are copied;
// src_dir's files are read under src_fs. The text model of a multimodal
// checkpoint (lo->pass) needs src_dir: the tensors that pass through are
// copied from its weights byte for byte (after the layout's, in the order
// of its files), its processor files (preprocessor_config.json,
// video_preprocessor_config.json, processor_config.json) too, and
// config.json is its config.json with the text model's config in text_config.
// Every file is written atomically; config.json is written last.
int eng_hf_save(const char *dir, const eng_config *c, const eng_layout *lo,
                const float *const *shards, int bf16, size_t max_shard_bytes, const eng_fs *src_fs,
                const char *src_dir, eng_err *e);

#endif
