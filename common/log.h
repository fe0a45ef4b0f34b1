/* common/log.h: leveled logging to stderr.
 *
 * The LOG_* macros test the level before evaluating their arguments, so a
 * disabled debug line costs one comparison. Lines carry a wall-clock stamp and
 * the level; the whole line is written with one fprintf so concurrent threads
 * do not interleave mid-line.
 */
#ifndef INFERD_COMMON_LOG_H
#define INFERD_COMMON_LOG_H

typedef enum { LOG_LEVEL_DEBUG = 0, LOG_LEVEL_INFO, LOG_LEVEL_WARN, LOG_LEVEL_ERROR, LOG_LEVEL_OFF } log_level;

extern log_level g_log_level;

void log_set_level(log_level lvl);
/* Parse "debug|info|warn|error|off"; returns -1 when unknown. */
int log_parse_level(const char *s);
void log_write(log_level lvl, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define INFERD_LOG_AT(lvl, ...)                      \
    do {                                      \
        if ((lvl) >= g_log_level)             \
            log_write((lvl), __VA_ARGS__);    \
    } while (0)
#define INFERD_LOG_DEBUG(...) INFERD_LOG_AT(LOG_LEVEL_DEBUG, __VA_ARGS__)
#define INFERD_LOG_INFO(...) INFERD_LOG_AT(LOG_LEVEL_INFO, __VA_ARGS__)
#define INFERD_LOG_WARN(...) INFERD_LOG_AT(LOG_LEVEL_WARN, __VA_ARGS__)
#define INFERD_LOG_ERROR(...) INFERD_LOG_AT(LOG_LEVEL_ERROR, __VA_ARGS__)

#endif
