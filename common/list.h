/* common/list.h: one intrusive doubly linked list for every module.
 *
 * The node is embedded in the owning struct (`inferd_list_node link;`) and
 * INFERD_LIST_ENTRY maps a node back to its owner, so linking and unlinking
 * never allocate and an element knows its own place: removal is O(1) given
 * the element alone. The list is circular around a sentinel node inside
 * inferd_list, which removes every head/tail special case; it also counts
 * its elements, because every user needed the count (queue lengths, free
 * blocks).
 *
 * Conventions: a node that is in no list has NULL links (a zeroed struct is
 * an unlinked node; unlink NULLs them again), so inferd_list_linked() is a
 * reliable membership test. first/last/next/prev return NULL at the ends, so
 * loops read `for (n = first(l); n; n = next(l, n))`.
 *
 * NOTE: an inferd_list points into itself (the sentinel). Initialize it in
 * place and never copy it by value; move elements with inferd_list_splice.
 * Not thread-safe: callers lock.
 */
#ifndef INFERD_COMMON_LIST_H
#define INFERD_COMMON_LIST_H

#include <stdbool.h>
#include <stddef.h>

typedef struct inferd_list_node {
    struct inferd_list_node *prev, *next;
} inferd_list_node;

typedef struct {
    inferd_list_node head; /* sentinel: head.next is the first element */
    size_t len;
} inferd_list;

/* The struct of type `type` whose member `member` is the node `ptr`. */
#define INFERD_CONTAINER_OF(ptr, type, member) ((type *)(void *)((char *)(ptr)-offsetof(type, member)))
/* Like INFERD_CONTAINER_OF, but NULL for a NULL node (as returned at the
 * ends of the list). NOTE: evaluates `node` twice. */
#define INFERD_LIST_ENTRY(node, type, member) ((node) ? INFERD_CONTAINER_OF((node), type, member) : (type *)NULL)

/* Iterate over the nodes of list `l` (inferd_list_node *it); the body must
 * not unlink `it` (use the _SAFE form for that). */
#define INFERD_LIST_FOR_EACH(l, it) for ((it) = (l)->head.next; (it) != &(l)->head; (it) = (it)->next)

/* Iterate over the nodes of list `l`; `it` may be unlinked (and its owner
 * freed) inside the body, `tmp` is scratch. Both are inferd_list_node *. */
#define INFERD_LIST_FOR_EACH_SAFE(l, it, tmp)                                                              \
    for ((it) = (l)->head.next, (tmp) = (it)->next; (it) != &(l)->head; (it) = (tmp), (tmp) = (it)->next)

/* Make `l` an empty list (in place). */
static inline void inferd_list_init(inferd_list *l)
{
    l->head.prev = l->head.next = &l->head;
    l->len = 0;
}

static inline bool inferd_list_empty(const inferd_list *l)
{
    return l->head.next == &l->head;
}

static inline size_t inferd_list_len(const inferd_list *l)
{
    return l->len;
}

/* True while `n` is linked in some list. */
static inline bool inferd_list_linked(const inferd_list_node *n)
{
    return n->next != NULL;
}

/* Link the unlinked node `n` right after `pos` (an element of l, or
 * &l->head for the front). */
static inline void inferd_list_insert_after(inferd_list *l, inferd_list_node *pos, inferd_list_node *n)
{
    n->prev = pos;
    n->next = pos->next;
    pos->next->prev = n;
    pos->next = n;
    l->len++;
}

/* Link the unlinked node `n` right before `pos` (an element of l, or
 * &l->head for the back). */
static inline void inferd_list_insert_before(inferd_list *l, inferd_list_node *pos, inferd_list_node *n)
{
    inferd_list_insert_after(l, pos->prev, n);
}

static inline void inferd_list_push_front(inferd_list *l, inferd_list_node *n)
{
    inferd_list_insert_after(l, &l->head, n);
}

static inline void inferd_list_push_back(inferd_list *l, inferd_list_node *n)
{
    inferd_list_insert_after(l, l->head.prev, n);
}

/* Remove `n` (an element of l) from l; its links become NULL. */
static inline void inferd_list_unlink(inferd_list *l, inferd_list_node *n)
{
    n->prev->next = n->next;
    n->next->prev = n->prev;
    n->prev = n->next = NULL;
    l->len--;
}

/* First / last element, NULL when empty. */
static inline inferd_list_node *inferd_list_first(const inferd_list *l)
{
    return inferd_list_empty(l) ? NULL : l->head.next;
}

static inline inferd_list_node *inferd_list_last(const inferd_list *l)
{
    return inferd_list_empty(l) ? NULL : l->head.prev;
}

/* The element after / before `n` (an element of l), NULL at the end. */
static inline inferd_list_node *inferd_list_next(const inferd_list *l, const inferd_list_node *n)
{
    return n->next == &l->head ? NULL : n->next;
}

static inline inferd_list_node *inferd_list_prev(const inferd_list *l, const inferd_list_node *n)
{
    return n->prev == &l->head ? NULL : n->prev;
}

/* Unlink and return the first element, NULL when empty. */
static inline inferd_list_node *inferd_list_pop_front(inferd_list *l)
{
    inferd_list_node *n = inferd_list_first(l);
    if (n)
        inferd_list_unlink(l, n);
    return n;
}

/* Move every element of `src` to the back of `dst`, in order, in O(1);
 * src is left empty. */
static inline void inferd_list_splice_back(inferd_list *dst, inferd_list *src)
{
    if (inferd_list_empty(src))
        return;
    inferd_list_node *first = src->head.next, *last = src->head.prev;
    first->prev = dst->head.prev;
    dst->head.prev->next = first;
    last->next = &dst->head;
    dst->head.prev = last;
    dst->len += src->len;
    inferd_list_init(src);
}

/* Check the list's structure: every node's prev link names its predecessor,
 * the walk returns to the sentinel within len steps and the count matches.
 * For invariant checks (O(len)); false on any inconsistency. */
static inline bool inferd_list_check(const inferd_list *l)
{
    const inferd_list_node *prev = &l->head;
    size_t n = 0;
    for (const inferd_list_node *it = l->head.next; it != &l->head; it = it->next) {
        if (!it || it->prev != prev || ++n > l->len)
            return false;
        prev = it;
    }
    return l->head.prev == prev && n == l->len;
}

#endif
