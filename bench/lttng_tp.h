/* The LTTng-UST tracepoint the benchmark compares weft's events with. */
#undef LTTNG_UST_TRACEPOINT_PROVIDER
#define LTTNG_UST_TRACEPOINT_PROVIDER weft_bench
#undef LTTNG_UST_TRACEPOINT_INCLUDE
#define LTTNG_UST_TRACEPOINT_INCLUDE "./lttng_tp.h"
#if !defined(WEFT_LTTNG_TP_H) || defined(LTTNG_UST_TRACEPOINT_HEADER_MULTI_READ)
#define WEFT_LTTNG_TP_H
#include <lttng/tracepoint.h>
LTTNG_UST_TRACEPOINT_EVENT(weft_bench, event,
    LTTNG_UST_TP_ARGS(long, v),
    LTTNG_UST_TP_FIELDS(lttng_ust_field_integer(long, v, v)))
#endif
#include <lttng/tracepoint-event.h>
