/* A file built into the binary (cmake/EmbedAssets.cmake writes tables of these). */
#ifndef MC_COMMON_EMBEDDED_H
#define MC_COMMON_EMBEDDED_H

#include <stddef.h>

typedef struct mc_embedded_asset {
    const char *name;           /* the file's base name; NULL ends a table */
    const unsigned char *data;  /* its bytes (plus a trailing 0) */
    size_t len;
} mc_embedded_asset_t;

#endif
