/* onnxc's string runtime: the kernels the lowered code calls for ONNX string tensors.
 *
 * What: a string tensor is lowered to a tensor of i64 *handles*; a handle is the address of a
 * NUL-terminated UTF-8 byte string.  Handles point either into the caller's input buffers (the
 * Python side encodes numpy object arrays), into constant globals of the compiled module (string
 * attributes, tables of keys), or into strings this library allocated during the run (results of
 * concat, case change, split).  The lowering (transforms/lowering/strings.py) emits
 * `func.call @onnxc_str_*` inside linalg.generic bodies and scf loops; this file defines them.
 *
 * Memory: every string allocated here goes into one process-wide arena (blocks of at least 1 MiB,
 * bump-allocated under a mutex, since the compiled code may call us from several OpenMP threads
 * at once; hash indexes of tables live until the release too).  The caller
 * (targets/cpu/strings.py) copies the outputs out after a run and then calls
 * `onnxc_str_arena_release`, holding a lock around run + copy + release so that two runs never
 * share the arena.  Nothing allocated here outlives a run.
 *
 * Why C and not callbacks into Python: the kernels run per element inside generated loops
 * (possibly on worker threads); a C call costs nanoseconds and needs no GIL.  It is built once
 * per source version with the system C compiler (targets/cpu/strings.py), like the C interface
 * of targets/backends/cbuild.py.
 *
 * Regular expressions: RegexFullMatch patterns (RE2 syntax) are translated at compile time to
 * POSIX extended syntax (the lowering says which subset), anchored as ^(...)$ and compiled here
 * with regcomp under a UTF-8 locale, so `.` and bracket expressions match whole code points.
 * Compiled patterns are cached by address and content.
 *
 * Case change: code point by code point (towlower_l / towupper_l in the requested locale, else
 * C.UTF-8): the simple one-to-one Unicode case mappings (German sharp s stays one letter).
 */
#define _GNU_SOURCE
#include <locale.h>
#include <pthread.h>
#include <regex.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <wctype.h>

#define EXPORT __attribute__((visibility("default")))

static const char EMPTY[1] = {0};

/* --- the arena ------------------------------------------------------------------------------- */

static pthread_mutex_t arena_mu = PTHREAD_MUTEX_INITIALIZER;
/* Strings are bump-allocated in blocks of at least 1 MiB (one malloc per block, not per string). */
typedef struct Block {
    struct Block *next;
    size_t cap, used;
    char data[];
} Block;
static Block *blocks = NULL;
static int64_t arena_strings = 0; /* strings allocated since the last release */
/* The first run-time failure of a kernel (see onnxc_str_failure). */
static char failure[256];

/* A fresh buffer of n bytes owned by the arena (NULL when out of memory). */
static char *arena_alloc(size_t n) {
    if (!n) n = 1;
    pthread_mutex_lock(&arena_mu);
    if (!blocks || blocks->cap - blocks->used < n) {
        size_t cap = n > ((size_t)1 << 20) ? n : ((size_t)1 << 20);
        Block *b = (Block *)malloc(sizeof(Block) + cap);
        if (!b) {
            pthread_mutex_unlock(&arena_mu);
            return NULL;
        }
        b->cap = cap;
        b->used = 0;
        b->next = blocks;
        blocks = b;
    }
    char *p = blocks->data + blocks->used;
    blocks->used += n;
    arena_strings++;
    pthread_mutex_unlock(&arena_mu);
    return p;
}

/* A string of `n` bytes copied from `s` (NUL added) in the arena; "" when out of memory is not an
 * option: the result would be wrong, so the process aborts rather than answer wrongly. */
static int64_t arena_string(const char *s, size_t n) {
    char *p = arena_alloc(n + 1);
    if (!p) abort();
    memcpy(p, s, n);
    p[n] = 0;
    return (int64_t)(intptr_t)p;
}

static void drop_indexes(void);

EXPORT void onnxc_str_arena_release(void) {
    drop_indexes();
    pthread_mutex_lock(&arena_mu);
    while (blocks) {
        Block *b = blocks;
        blocks = b->next;
        free(b);
    }
    arena_strings = 0;
    failure[0] = 0;
    pthread_mutex_unlock(&arena_mu);
}

/* How many strings the arena holds (tests check that a run leaves none behind). */
EXPORT int64_t onnxc_str_arena_count(void) {
    pthread_mutex_lock(&arena_mu);
    int64_t n = arena_strings;
    pthread_mutex_unlock(&arena_mu);
    return n;
}

static const char *S(int64_t h) { return h ? (const char *)(intptr_t)h : EMPTY; }

/* The boundary's output conversion: the n strings of `h` copied NUL-separated into `out` (when
 * `cap` bytes suffice); returns the bytes needed.  One call per output instead of one per string. */
EXPORT int64_t onnxc_str_pack(const int64_t *h, int64_t n, char *out, int64_t cap) {
    int64_t total = 0;
    for (int64_t i = 0; i < n; i++) {
        const char *s = S(h[i]);
        size_t len = strlen(s);
        if (out && total + (int64_t)len + 1 <= cap) {
            memcpy(out + total, s, len);
            out[total + len] = 0;
        }
        total += (int64_t)len + 1;
    }
    return total;
}

/* --- equality, concat -------------------------------------------------------------------------- */

EXPORT int32_t onnxc_str_eq(int64_t a, int64_t b) { return strcmp(S(a), S(b)) == 0; }

EXPORT int64_t onnxc_str_concat(int64_t a, int64_t b) {
    const char *x = S(a), *y = S(b);
    size_t nx = strlen(x), ny = strlen(y);
    char *p = arena_alloc(nx + ny + 1);
    if (!p) abort();
    memcpy(p, x, nx);
    memcpy(p + nx, y, ny + 1);
    return (int64_t)(intptr_t)p;
}

/* --- UTF-8 and locales ------------------------------------------------------------------------- */

/* Decode one code point at s (n bytes left); returns its length, or 0 for an invalid sequence
 * (the caller then copies that byte through unchanged). */
static size_t utf8_decode(const unsigned char *s, size_t n, uint32_t *cp) {
    if (s[0] < 0x80) { *cp = s[0]; return 1; }
    size_t len = (s[0] & 0xE0) == 0xC0 ? 2 : (s[0] & 0xF0) == 0xE0 ? 3 : (s[0] & 0xF8) == 0xF0 ? 4 : 0;
    if (!len || len > n) return 0;
    uint32_t c = s[0] & (0x7F >> len);
    for (size_t i = 1; i < len; i++) {
        if ((s[i] & 0xC0) != 0x80) return 0;
        c = (c << 6) | (s[i] & 0x3F);
    }
    *cp = c;
    return len;
}

static size_t utf8_encode(uint32_t c, char *out) {
    if (c < 0x80) { out[0] = (char)c; return 1; }
    if (c < 0x800) { out[0] = (char)(0xC0 | (c >> 6)); out[1] = (char)(0x80 | (c & 0x3F)); return 2; }
    if (c < 0x10000) {
        out[0] = (char)(0xE0 | (c >> 12)); out[1] = (char)(0x80 | ((c >> 6) & 0x3F)); out[2] = (char)(0x80 | (c & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | (c >> 18)); out[1] = (char)(0x80 | ((c >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((c >> 6) & 0x3F)); out[3] = (char)(0x80 | (c & 0x3F));
    return 4;
}

/* A UTF-8 LC_CTYPE locale for `name` ("en_US", "tr_TR.UTF-8"...), else C.UTF-8, else the C
 * locale.  Cached per name (a handful of names per process). */
static pthread_mutex_t locale_mu = PTHREAD_MUTEX_INITIALIZER;
static struct { char name[64]; locale_t loc; } locales[16];
static int n_locales = 0;

static locale_t utf8_locale(const char *name) {
    pthread_mutex_lock(&locale_mu);
    for (int i = 0; i < n_locales; i++)
        if (strcmp(locales[i].name, name) == 0) {
            locale_t l = locales[i].loc;
            pthread_mutex_unlock(&locale_mu);
            return l;
        }
    locale_t loc = (locale_t)0;
    char buf[96];
    if (name[0] && strlen(name) < 48) {
        if (strchr(name, '.')) loc = newlocale(LC_CTYPE_MASK, name, (locale_t)0);
        if (!loc) { snprintf(buf, sizeof buf, "%s.UTF-8", name); loc = newlocale(LC_CTYPE_MASK, buf, (locale_t)0); }
        if (!loc) { snprintf(buf, sizeof buf, "%s.utf8", name); loc = newlocale(LC_CTYPE_MASK, buf, (locale_t)0); }
    }
    if (!loc) loc = newlocale(LC_CTYPE_MASK, "C.UTF-8", (locale_t)0);
    if (!loc) loc = newlocale(LC_CTYPE_MASK, "C", (locale_t)0);
    if (n_locales < 16 && strlen(name) < sizeof locales[0].name) {
        strcpy(locales[n_locales].name, name);
        locales[n_locales].loc = loc;
        n_locales++;
    }
    pthread_mutex_unlock(&locale_mu);
    return loc;
}

/* mode 1: lower, 2: upper, else a copy. */
static uint32_t map_case(uint32_t c, int32_t mode, locale_t loc) {
    if (mode == 1) return (uint32_t)towlower_l((wint_t)c, loc);
    if (mode == 2) return (uint32_t)towupper_l((wint_t)c, loc);
    return c;
}

EXPORT int64_t onnxc_str_change_case(int64_t h, int32_t mode, int64_t locale_name) {
    const unsigned char *s = (const unsigned char *)S(h);
    size_t n = strlen((const char *)s);
    locale_t loc = utf8_locale(S(locale_name));
    char *out = arena_alloc(4 * n + 1); /* a mapped code point never needs more than 4 bytes */
    if (!out) abort();
    size_t i = 0, o = 0;
    while (i < n) {
        uint32_t c;
        size_t len = utf8_decode(s + i, n - i, &c);
        if (!len) { out[o++] = (char)s[i++]; continue; }
        o += utf8_encode(map_case(c, mode, loc), out + o);
        i += len;
    }
    out[o] = 0;
    return (int64_t)(intptr_t)out;
}

/* Equal up to case (both sides lowered code point by code point in `loc`). */
static int equal_fold(const char *a, const char *b, locale_t loc) {
    const unsigned char *x = (const unsigned char *)a, *y = (const unsigned char *)b;
    size_t nx = strlen(a), ny = strlen(b), i = 0, j = 0;
    while (i < nx && j < ny) {
        uint32_t c, d;
        size_t lx = utf8_decode(x + i, nx - i, &c), ly = utf8_decode(y + j, ny - j, &d);
        if (!lx) { c = 0x80000000u | x[i]; lx = 1; }
        if (!ly) { d = 0x80000000u | y[j]; ly = 1; }
        if (!(c & 0x80000000u)) c = map_case(c, 1, loc);
        if (!(d & 0x80000000u)) d = map_case(d, 1, loc);
        if (c != d) return 0;
        i += lx;
        j += ly;
    }
    return i == nx && j == ny;
}

/* --- numbers -------------------------------------------------------------------------------------- */

static locale_t c_numeric(void) {
    static locale_t loc = (locale_t)0;
    pthread_mutex_lock(&locale_mu);
    if (!loc) loc = newlocale(LC_ALL_MASK, "C", (locale_t)0);
    pthread_mutex_unlock(&locale_mu);
    return loc;
}

/* Cast string -> float: decimal or scientific, "INF"/"+INF"/"-INF"/"NaN" in any case (strtod in
 * the C locale, whatever the process's decimal separator); 0 for text that is no number (the
 * spec leaves that undefined). */
EXPORT double onnxc_str_to_f64(int64_t h) { return strtod_l(S(h), NULL, c_numeric()); }

/* Cast string -> integer: the leading decimal integer ("100.5" -> 100), as bits of an i64. */
EXPORT int64_t onnxc_str_to_i64(int64_t h, int32_t is_unsigned) {
    return is_unsigned ? (int64_t)strtoull_l(S(h), NULL, 10, c_numeric()) : (int64_t)strtoll_l(S(h), NULL, 10, c_numeric());
}

/* --- tables of constant strings ---------------------------------------------------------------- */
/* A table is a constant blob: the decimal count, NUL, then each string NUL-terminated. */

static const char *table_entries(int64_t table, int64_t *count) {
    const char *t = S(table);
    *count = strtoll(t, NULL, 10);
    return t + strlen(t) + 1;
}

/* Hash indexes of tables for exact lookups, built on a table's first lookup in a run and dropped
 * by onnxc_str_arena_release (a table's address is only known to stay the same table while the
 * code that holds it runs).  Open addressing over FNV-1a hashes; the first of equal keys wins. */
typedef struct TableIndex {
    const char *table;
    uint64_t mask;
    const char **keys;
    int64_t *ids;
    const char **entries; /* by position, for onnxc_str_table_get */
    struct TableIndex *next;
} TableIndex;
static pthread_mutex_t index_mu = PTHREAD_MUTEX_INITIALIZER;
static TableIndex *indexes = NULL;

static uint64_t fnv1a(const char *s) {
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

static TableIndex *table_index(const char *t) {
    pthread_mutex_lock(&index_mu);
    for (TableIndex *x = indexes; x; x = x->next)
        if (x->table == t) {
            pthread_mutex_unlock(&index_mu);
            return x;
        }
    int64_t count;
    const char *e = table_entries((int64_t)(intptr_t)t, &count);
    uint64_t cap = 16;
    while (cap < 2 * (uint64_t)count) cap *= 2;
    TableIndex *x = (TableIndex *)calloc(1, sizeof *x);
    if (!x) abort();
    x->keys = (const char **)calloc(cap, sizeof(const char *));
    x->ids = (int64_t *)calloc(cap, sizeof(int64_t));
    x->entries = (const char **)calloc(count ? (size_t)count : 1, sizeof(const char *));
    if (!x->keys || !x->ids || !x->entries) abort();
    x->table = t;
    x->mask = cap - 1;
    for (int64_t i = 0; i < count; i++, e += strlen(e) + 1) {
        x->entries[i] = e;
        uint64_t slot = fnv1a(e) & x->mask;
        while (x->keys[slot] && strcmp(x->keys[slot], e) != 0) slot = (slot + 1) & x->mask;
        if (!x->keys[slot]) { x->keys[slot] = e; x->ids[slot] = i; }
    }
    x->next = indexes;
    indexes = x;
    pthread_mutex_unlock(&index_mu);
    return x;
}

static void drop_indexes(void) {
    pthread_mutex_lock(&index_mu);
    while (indexes) {
        TableIndex *x = indexes;
        indexes = x->next;
        free(x->keys);
        free(x->ids);
        free(x->entries);
        free(x);
    }
    pthread_mutex_unlock(&index_mu);
}

/* Index of `h` in the table (-1 when absent); fold_case != 0 compares up to case in the locale
 * named by `locale_name` (a linear scan: stopword lists); exact lookups in tables of more than a
 * few keys go through the table's hash index. */
EXPORT int64_t onnxc_str_table_find(int64_t table, int64_t h, int32_t fold_case, int64_t locale_name) {
    int64_t count;
    const char *e = table_entries(table, &count);
    const char *s = S(h);
    if (!fold_case && count > 8) {
        TableIndex *x = table_index(S(table));
        uint64_t slot = fnv1a(s) & x->mask;
        while (x->keys[slot]) {
            if (strcmp(x->keys[slot], s) == 0) return x->ids[slot];
            slot = (slot + 1) & x->mask;
        }
        return -1;
    }
    locale_t loc = fold_case ? utf8_locale(S(locale_name)) : (locale_t)0;
    for (int64_t i = 0; i < count; i++) {
        if (fold_case ? equal_fold(e, s, loc) : strcmp(e, s) == 0) return i;
        e += strlen(e) + 1;
    }
    return -1;
}

/* The handle of entry i (no copy: it points into the constant blob). */
EXPORT int64_t onnxc_str_table_get(int64_t table, int64_t i) {
    int64_t count;
    const char *e = table_entries(table, &count);
    if (i < 0 || i >= count) return (int64_t)(intptr_t)EMPTY;
    if (count > 8) return (int64_t)(intptr_t)table_index(S(table))->entries[i];
    for (int64_t k = 0; k < i; k++) e += strlen(e) + 1;
    return (int64_t)(intptr_t)e;
}

/* --- split ------------------------------------------------------------------------------------- */

/* Python's str.split whitespace for ASCII: space, \t \n \v \f \r and \x1c-\x1f. */
static int is_space(unsigned char c) { return c == ' ' || (c >= 9 && c <= 13) || (c >= 0x1c && c <= 0x1f); }

/* Walk the pieces of s split by delim ("" = runs of whitespace, ends ignored) with at most
 * `maxsplit` splits (< 0: no limit), as Python's str.split does.  Calls back for piece `want`
 * (or counts all when want < 0); returns the number of pieces. */
static int64_t split_walk(const char *s, const char *delim, int64_t maxsplit, int64_t want, const char **start, size_t *len) {
    size_t n = strlen(s), dl = strlen(delim), i = 0;
    int64_t pieces = 0, splits = 0;
    if (dl) {
        for (;;) {
            const char *hit = (maxsplit < 0 || splits < maxsplit) ? strstr(s + i, delim) : NULL;
            size_t end = hit ? (size_t)(hit - s) : n;
            if (pieces == want) { *start = s + i; *len = end - i; }
            pieces++;
            if (!hit) break;
            splits++;
            i = end + dl;
        }
        return pieces;
    }
    for (;;) {
        while (i < n && is_space((unsigned char)s[i])) i++;
        if (i >= n) break;
        size_t end = i;
        if (maxsplit >= 0 && splits >= maxsplit) {
            end = n; /* the rest, as it is (Python keeps its trailing whitespace) */
        } else {
            while (end < n && !is_space((unsigned char)s[end])) end++;
        }
        if (pieces == want) { *start = s + i; *len = end - i; }
        pieces++;
        splits++;
        i = end;
        if (end >= n || (maxsplit >= 0 && splits > maxsplit)) break;
    }
    return pieces;
}

EXPORT int64_t onnxc_str_split_count(int64_t h, int64_t delim, int64_t maxsplit) {
    const char *st;
    size_t len;
    return split_walk(S(h), S(delim), maxsplit, -1, &st, &len);
}

/* Piece j of the split ("" when there are fewer pieces: the padding of the output). */
EXPORT int64_t onnxc_str_split_part(int64_t h, int64_t delim, int64_t maxsplit, int64_t j) {
    const char *st = NULL;
    size_t len = 0;
    int64_t n = split_walk(S(h), S(delim), maxsplit, j, &st, &len);
    if (j >= n || !st) return (int64_t)(intptr_t)EMPTY;
    return arena_string(st, len);
}

/* --- regular expressions ----------------------------------------------------------------------- */

static pthread_mutex_t regex_mu = PTHREAD_MUTEX_INITIALIZER;
typedef struct Compiled { const char *key; char *text; int icase; int ok; regex_t re; struct Compiled *next; } Compiled;
static Compiled *compiled = NULL;

/* The compiled form of a (translated, anchored) pattern; NULL when regcomp refuses it. */
static Compiled *get_regex(const char *pattern, int32_t icase) {
    pthread_mutex_lock(&regex_mu);
    for (Compiled *c = compiled; c; c = c->next)
        /* by address and content: a later module may reuse the address for another pattern */
        if (c->key == pattern && c->icase == icase && strcmp(c->text, pattern) == 0) {
            pthread_mutex_unlock(&regex_mu);
            return c->ok ? c : NULL;
        }
    Compiled *c = (Compiled *)calloc(1, sizeof *c);
    if (!c) abort();
    c->key = pattern;
    c->icase = icase;
    c->text = strdup(pattern);
    locale_t old = uselocale(utf8_locale(""));
    c->ok = regcomp(&c->re, pattern, REG_EXTENDED | REG_NOSUB | (icase ? REG_ICASE : 0)) == 0;
    uselocale(old);
    c->next = compiled;
    compiled = c;
    pthread_mutex_unlock(&regex_mu);
    return c->ok ? c : NULL;
}

/* The first run-time failure of a kernel (a pattern regcomp refused), reported by the caller
 * after the run as an error instead of an answer; cleared by onnxc_str_arena_release. */
EXPORT const char *onnxc_str_failure(void) { return failure; }

/* 1 when the whole string matches, 0 when not (and when the pattern does not compile: the
 * failure is recorded first, so the caller raises instead of returning the answer). */
EXPORT int32_t onnxc_str_regex_full_match(int64_t h, int64_t pattern, int32_t icase) {
    Compiled *c = get_regex(S(pattern), icase);
    if (!c) {
        pthread_mutex_lock(&arena_mu);
        if (!failure[0]) snprintf(failure, sizeof failure, "the regular expression %.200s does not compile", S(pattern));
        pthread_mutex_unlock(&arena_mu);
        return 0;
    }
    locale_t old = uselocale(utf8_locale(""));
    int r = regexec(&c->re, S(h), 0, NULL, 0);
    uselocale(old);
    return r == 0;
}

/* Whether a pattern compiles (used by the Python side to check translated patterns). */
EXPORT int32_t onnxc_str_regex_compiles(const char *pattern, int32_t icase) {
    return get_regex(pattern, icase) != NULL;
}
