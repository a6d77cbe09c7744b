// Chat templates without Jinja: the two template families traind's users
// fine-tune (ChatML, as Qwen2/2.5 ship it, and Llama-3's) rendered by
// built-in renderers that give transformers' apply_chat_template output
// token for token, with its assistant mask (tests/parity/test_chat.c holds
// them to committed fixtures). Any other template is refused by name; the
// option chat_template (chatml | llama3) forces one.
//
// A model directory's template is read from tokenizer_config.json
// ("chat_template": a string, or a list of {name, template} of which
// "default" is taken) or, where transformers 5 saves it, chat_template.jinja.
// It is recognised by its markers: <|im_start|>/<|im_end|> (ChatML; a
// literal default system prompt rendered when the first message is not a
// system one is read out of the template), <|start_header_id|>, <|eot_id|>
// and `| trim` (Llama-3.0). Qwen3's and Qwen3.5/3.6's thinking templates
// and Llama-3.1's date header are refused: their output depends on more than
// these renderers do.
//
// Rendering (messages of roles system, user, assistant):
//   ChatML: [<|im_start|>system\n{default}<|im_end|>\n]
//           <|im_start|>{role}\n{content}<|im_end|>\n ...
//   Llama-3: {bos}<|start_header_id|>{role}<|end_header_id|>\n\n
//            {content stripped as Python's str.strip}<|eot_id|> ...
// The assistant mask covers each assistant message's content and its end
// marker (<|im_end|> / <|eot_id|>), not the header nor the newline after.
// Tokens count in the loss exactly where the mask is 1.
#ifndef ENG_TOK_CHAT_H
#define ENG_TOK_CHAT_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "common/fs_open.h"
#include "tok/tok.h"

typedef enum eng_chat_kind { ENG_CHAT_NONE = 0, ENG_CHAT_CHATML, ENG_CHAT_LLAMA3 } eng_chat_kind;

// What a model directory says about its tokens beyond tokenizer.json.
typedef struct eng_chat {
  eng_chat_kind kind;   // NONE: the directory has no template (chat data refused)
  char *why;            // when kind is NONE and a template was there: why it was not recognised
  char *default_system; // ChatML: the system prompt used when none is given, or NULL
  char *bos, *eos;      // tokenizer_config.json's bos_token and eos_token, or NULL
} eng_chat;

typedef struct eng_chat_msg {
  const char *role;
  const char *content;
  size_t len;
} eng_chat_msg;

// Reads dir/tokenizer_config.json (and dir/chat_template.jinja) under fs.
// force: NULL to recognise the template, else "chatml" or "llama3". A
// missing tokenizer_config.json leaves everything NULL / NONE.
int eng_chat_load(eng_chat *c, const eng_fs *fs, const char *dir, const char *force, eng_err *e);
// The same from template text (NULL: none) and the token names.
int eng_chat_from_template(eng_chat *c, const char *tmpl, const char *force, const char *bos, const char *eos,
                           eng_err *e);
void eng_chat_free(eng_chat *c);
// "chatml", "llama3" or "none".
const char *eng_chat_name(eng_chat_kind k);

// Whether role is one the renderers take (system, user, assistant).
int eng_chat_role_ok(const char *role);

// Renders msgs[0..n) (with the generation prompt when gen_prompt) and
// encodes the text with enc, appending the ids to out and to *mask (grown
// with out: mask[i] = 1 where token i is assistant output) for messages
// from index mask_from on (0: every assistant message). The contents must be
// valid UTF-8. ENG_EINVAL "message i: ..." for a role the template cannot
// render.
int eng_chat_encode(const eng_chat *c, eng_tok_enc *enc, const eng_chat_msg *msgs, int n, int mask_from,
                    int gen_prompt, eng_tok_ids *out, uint8_t **mask, size_t *mask_cap, eng_err *e);

#endif
