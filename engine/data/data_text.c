// Plain text through the byte-level tokenizer. Text files are small (the
// demo's is a few hundred KB), so they are tokenised into memory at open.
#include <stdlib.h>

#include "data/data_impl.h"
#include "data/tokenizer.h"

int eng_data_text_load(eng_data *d, const char *buf, size_t len, eng_err *e) {
  if (d->vocab < ENG_TOK_BYTE_VOCAB)
    return eng_err_set(e, ENG_EINVAL,
                       "%s: plain text is read by the byte-level tokenizer, which needs vocab >= %d, got vocab %d",
                       d->path, ENG_TOK_BYTE_VOCAB, d->vocab);
  d->text_ids = malloc(len * sizeof *d->text_ids);
  if (!d->text_ids)
    return eng_err_set(e, ENG_ENOMEM, "%s: cannot allocate the tokens of %zu bytes of text", d->path, len);
  eng_tok_byte_encode((const uint8_t *)buf, len, d->text_ids);
  // Byte ids are 0..255, below vocab by the check above: nothing else to validate.
  d->ntok = len;
  return ENG_OK;
}
