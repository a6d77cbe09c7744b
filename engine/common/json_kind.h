// The JSON type of a value in words ("an object", "a string", ...), for
// error messages that say what a file holds where it should hold another.
#ifndef ENG_COMMON_JSON_KIND_H
#define ENG_COMMON_JSON_KIND_H

#include <jansson.h>

const char *eng_json_kind(const json_t *v);

#endif
