/*
 * expr_date.c -- date aggregation operators: the date parts ($year ... $isoDayOfWeek, with
 * 'timezone'), $dateToString, $dateFromString, $dateAdd/$dateSubtract, $dateDiff and
 * $dateTrunc. Time zones: "UTC"/"GMT"/"Z", fixed offsets ("+02:00", "-0530", "+03") and Olson
 * names from the system tz database (expr_tz.c); an unknown name fails with MongoDB's 40485.
 * Calendar arithmetic is proleptic Gregorian on days since the epoch, in 128-bit integers.
 */
#include "bson/bson_iter.h"
#include "query/expression_private.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#define MS_PER_DAY 86400000LL

/* Intermediate date arithmetic is done in 128 bits so that no int64 input can overflow it;
 * results are range-checked before they become dates. */
__extension__ typedef __int128 i128;

static i128
floor_div128(i128 a, i128 b)
{
    i128 q = a / b;
    if ((a % b != 0) && ((a < 0) != (b < 0))) {
        q--;
    }
    return q;
}

static bool
fits64(i128 x, int64_t *out)
{
    if (x > (i128)INT64_MAX || x < (i128)INT64_MIN) {
        return false;
    }
    *out = (int64_t)x;
    return true;
}

/* days since 1970-01-01 -> civil date (Howard Hinnant's algorithm) */
static void
civil_from_days(int64_t z, int64_t *y, int *m, int *d)
{
    int64_t era, doe, yoe, doy, mp;
    z += 719468;
    era = (z >= 0 ? z : z - 146096) / 146097;
    doe = z - era * 146097;
    yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    *y = yoe + era * 400;
    doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    mp = (5 * doy + 2) / 153;
    *d = (int)(doy - (153 * mp + 2) / 5 + 1);
    *m = (int)(mp < 10 ? mp + 3 : mp - 9);
    if (*m <= 2) {
        (*y)++;
    }
}

static int64_t
days_from_civil(int64_t y, int m, int d)
{
    int64_t era, yoe, doy, doe;
    y -= m <= 2;
    era = (y >= 0 ? y : y - 399) / 400;
    yoe = y - era * 400;
    doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
    doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    return era * 146097 + doe - 719468;
}

static int64_t
floor_div(int64_t a, int64_t b)
{
    int64_t q = a / b;
    if ((a % b != 0) && ((a < 0) != (b < 0))) {
        q--;
    }
    return q;
}

typedef struct parts {
    int64_t year;
    int month, day, hour, minute, second, ms;
    int yday; /* 1..366 */
    int wday; /* 0 = Sunday */
    int64_t iso_year;
    int iso_week, iso_wday; /* iso_wday 1 = Monday */
    int64_t days;           /* days since epoch (local) */
} parts_t;

static bool
is_leap(int64_t y)
{
    return (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
}

static void
to_parts(int64_t ms, int64_t offset_ms, parts_t *p)
{
    i128 local = (i128)ms + offset_ms;
    int64_t days = (int64_t)floor_div128(local, MS_PER_DAY),
            rem = (int64_t)(local - (i128)days * MS_PER_DAY), jan1, wk;
    p->days = days;
    civil_from_days(days, &p->year, &p->month, &p->day);
    p->hour = (int)(rem / 3600000);
    p->minute = (int)(rem / 60000 % 60);
    p->second = (int)(rem / 1000 % 60);
    p->ms = (int)(rem % 1000);
    jan1 = days_from_civil(p->year, 1, 1);
    p->yday = (int)(days - jan1 + 1);
    p->wday = (int)(((days % 7) + 7 + 4) % 7); /* 1970-01-01 was a Thursday */
    p->iso_wday = p->wday == 0 ? 7 : p->wday;
    /* ISO week: the week with the year's first Thursday is week 1. */
    wk = (p->yday - p->iso_wday + 10) / 7;
    p->iso_year = p->year;
    if (wk < 1) {
        int64_t py = p->year - 1;
        int pdays = is_leap(py) ? 366 : 365;
        int pyday = p->yday + pdays;
        p->iso_year = py;
        wk = (pyday - p->iso_wday + 10) / 7;
    } else {
        {
            /* Dec 29..31 may belong to week 1 of the next year. */
            int64_t thursday = days - (p->iso_wday - 4);
            int64_t ty;
            int tm, td;
            civil_from_days(thursday, &ty, &tm, &td);
            if (ty != p->year) {
                p->iso_year = ty;
                wk = 1;
            }
        }
    }
    p->iso_week = (int)wk;
}

/* ---- time zones ----
 * A time zone is a fixed offset or an Olson zone; local wall-clock instants are "UTC
 * milliseconds + offset at that instant". */
typedef struct tz {
    int64_t fixed; /* ms, when zone is NULL */
    const expr_tzzone_t *zone;
} tz_t;

static int64_t
tz_off(const tz_t *tz, int64_t utc_ms)
{
    return tz->zone != NULL ? expr_tz_zone_offset(tz->zone, utc_ms) : tz->fixed;
}

static int64_t
clamp64(i128 x)
{
    return x > (i128)INT64_MAX ? INT64_MAX : (x < (i128)INT64_MIN ? INT64_MIN : (int64_t)x);
}

/* A local wall-clock instant back to UTC (for a time that is skipped or repeated by a DST
 * change, the offset in force just before it). */
static i128
tz_to_utc(const tz_t *tz, i128 local)
{
    int64_t off;
    if (tz->zone == NULL) {
        return local - tz->fixed;
    }
    off = tz_off(tz, clamp64(local - tz_off(tz, clamp64(local))));
    return local - off;
}

static bool
parse_offset(const char *s, int64_t *off)
{
    int sign, h = 0, m = 0, n = 0;
    size_t len = strlen(s);
    if (len < 3 || (s[0] != '+' && s[0] != '-')) {
        return false;
    }
    sign = s[0] == '-' ? -1 : 1;
    for (size_t i = 1; i < len; i++) {
        if (s[i] == ':') {
            if (i != 3) {
                return false;
            }
            continue;
        }
        if (!isdigit((unsigned char)s[i])) {
            return false;
        }
        n++;
    }
    if (n != 2 && n != 4) {
        return false;
    }
    h = (s[1] - '0') * 10 + (s[2] - '0');
    if (n == 4) {
        const char *mm = s[3] == ':' ? s + 4 : s + 3;
        m = (mm[0] - '0') * 10 + (mm[1] - '0');
    }
    if (h > 99 || m > 59) {
        return false;
    }
    *off = sign * ((int64_t)h * 3600000 + (int64_t)m * 60000);
    return true;
}

/* Evaluate a 'timezone' argument. *null = the timezone is nullish (result null). */
static int
eval_tz(const shl_expr_t *tz, const shl_expr_ctx_t *ctx, tz_t *out, bool *null, shl_status_t *st)
{
    bson_value_t v;
    int ret = 0;
    int64_t *off = &out->fixed;
    out->fixed = 0;
    out->zone = NULL;
    *null = false;
    if (tz == NULL) {
        return 0;
    }
    SHL_ERR(shl_expr_evaluate(tz, ctx, &v, st));
    if (expr_nullish(&v)) {
        *null = true;
    } else if (v.value_type != BSON_TYPE_UTF8) {
        ret = shl_status_set(st, 40517, "timezone must evaluate to a string, found %s",
                             expr_type_name(&v));
    } else {
        const char *s = v.value.v_utf8.str;
        if (strcmp(s, "UTC") == 0 || strcmp(s, "GMT") == 0 || strcmp(s, "Z") == 0 ||
            strcmp(s, "Etc/UTC") == 0 || strcmp(s, "Etc/GMT") == 0 || strcmp(s, "UCT") == 0 ||
            strcmp(s, "Zulu") == 0) {
            *off = 0;
        } else if (!parse_offset(s, off) && (out->zone = expr_tz_lookup(s)) == NULL) {
            ret = shl_status_set(st, 40485, "unrecognized time zone identifier: \"%s\"", s);
        }
    }
    bson_value_destroy(&v);
done:
    return ret;
}

/* ---- date part operators: args [date, timezone] ---- */

EXPR_PARSE(expr_parse_date_part)
{
    bson_t view;
    bson_iter_t it;
    int ret = 0;
    e->args = bson_malloc0(2 * sizeof(shl_expr_t *));
    e->nargs = 2;
    if (arg->value_type == BSON_TYPE_DOCUMENT) {
        query_bson_view(arg, &view);
        if (bson_iter_init(&it, &view) && shl_iter_next(&it) && shl_iter_key(&it)[0] != '$') {
            bson_iter_init(&it, &view);
            while (shl_iter_next(&it)) {
                int k = strcmp(shl_iter_key(&it), "date") == 0
                            ? 0
                            : (strcmp(shl_iter_key(&it), "timezone") == 0 ? 1 : -1);
                if (k < 0) {
                    SHL_FAIL(st, 40535, "unrecognized option to %s: \"%s\"", op->name,
                             shl_iter_key(&it));
                }
                shl_expr_destroy(e->args[k]);
                e->args[k] = NULL;
                SHL_ERR(expr_parse_operand(bson_iter_value(&it), &e->args[k], st));
            }
            if (e->args[0] == NULL) {
                SHL_FAIL(st, 40539, "missing 'date' argument to %s, provided: %s", op->name,
                         "object");
            }
            goto done;
        }
    }
    if (arg->value_type == BSON_TYPE_ARRAY) {
        query_bson_view(arg, &view);
        if (bson_count_keys(&view) != 1) {
            SHL_FAIL(st, 40536,
                     "%s accepts exactly one argument if given an array, but was given %u",
                     op->name, bson_count_keys(&view));
        }
        bson_iter_init(&it, &view);
        shl_iter_next(&it);
        SHL_ERR(expr_parse_operand(bson_iter_value(&it), &e->args[0], st));
        goto done;
    }
    SHL_ERR(expr_parse_operand(arg, &e->args[0], st));
done:
    return ret;
}

/* Evaluate date + timezone into parts; *null when the result is null. */
static int
eval_parts(const shl_expr_t *e, const shl_expr_ctx_t *ctx, parts_t *p, bool *null, shl_status_t *st)
{
    bson_value_t d;
    int64_t ms;
    tz_t tz;
    bool tznull = false;
    int ret = 0;
    expr_value_missing(&d);
    *null = false;
    SHL_ERR(shl_expr_evaluate(e->args[0], ctx, &d, st));
    SHL_ERR(eval_tz(e->args[1], ctx, &tz, &tznull, st));
    if (expr_nullish(&d) || tznull) {
        *null = true;
        goto done;
    }
    if (!expr_value_as_date(&d, &ms)) {
        SHL_FAIL(st, QC_COERCE_DATE, "can't convert from BSON type %s to Date", expr_type_name(&d));
    }
    to_parts(ms, tz_off(&tz, ms), p);
done:
    bson_value_destroy(&d);
    return ret;
}

#define DATE_PART(fn, expr_)                                                                       \
    EXPR_FN(fn)                                                                                    \
    {                                                                                              \
        parts_t p;                                                                                 \
        bool null = false;                                                                         \
        int ret = eval_parts(e, ctx, &p, &null, st);                                               \
        if (ret == 0) {                                                                            \
            if (null) {                                                                            \
                expr_value_null(out);                                                              \
            } else {                                                                               \
                expr_value_int32(out, (int32_t)(expr_));                                           \
            }                                                                                      \
        }                                                                                          \
        return ret;                                                                                \
    }

DATE_PART(expr_op_year, p.year)
DATE_PART(expr_op_month, p.month)
DATE_PART(expr_op_day_of_month, p.day)
DATE_PART(expr_op_hour, p.hour)
DATE_PART(expr_op_minute, p.minute)
DATE_PART(expr_op_second, p.second)
DATE_PART(expr_op_millisecond, p.ms)
DATE_PART(expr_op_day_of_week, p.wday + 1)
DATE_PART(expr_op_day_of_year, p.yday)
DATE_PART(expr_op_week, (p.yday - 1 + 7 - p.wday) / 7)
DATE_PART(expr_op_iso_week, p.iso_week)
DATE_PART(expr_op_iso_week_year, p.iso_year)
DATE_PART(expr_op_iso_day_of_week, p.iso_wday)

/* ---- $dateToString: args [date, format, timezone, onNull] ---- */

EXPR_PARSE(expr_parse_date_to_string)
{
    static const char *const keys[] = {"date", "format", "timezone", "onNull"};
    int ret = 0;
    SHL_ERR(expr_parse_named(op, arg, keys, 4, e, 18629, 18534, st));
    if (e->args[0] == NULL) {
        SHL_FAIL(st, 18628, "Missing 'date' parameter to $dateToString");
    }
done:
    return ret;
}

static int
validate_format(const char *f, size_t len, shl_status_t *st)
{
    for (size_t i = 0; i < len; i++) {
        if (f[i] != '%') {
            continue;
        }
        if (i + 1 >= len) {
            return shl_status_set(st, 18535, "Unmatched '%%' at end of format string");
        }
        if (strchr("bBdGHjLmMSuUVwYzZ%", f[i + 1]) == NULL || f[i + 1] == '\0') {
            return shl_status_set(st, 18536, "Invalid format character '%%%c' in format string",
                                  f[i + 1]);
        }
        i++;
    }
    return 0;
}

static const char *const month_names[12] = {"January",   "February", "March",    "April",
                                            "May",       "June",     "July",     "August",
                                            "September", "October",  "November", "December"};

static void
format_date(const char *f, size_t len, int64_t ms, const tz_t *tz, bson_string_t *s)
{
    parts_t p;
    int64_t off = tz_off(tz, ms);
    to_parts(ms, off, &p);
    for (size_t i = 0; i < len; i++) {
        if (f[i] != '%') {
            char c[2] = {f[i], 0};
            bson_string_append(s, c);
            continue;
        }
        i++;
        switch (f[i]) {
        case 'b':
        case 'B':
            bson_string_append_printf(s, f[i] == 'b' ? "%.3s" : "%s", month_names[p.month - 1]);
            break;
        case 'Y':
            bson_string_append_printf(s, "%04lld", (long long)p.year);
            break;
        case 'G':
            bson_string_append_printf(s, "%04lld", (long long)p.iso_year);
            break;
        case 'm':
            bson_string_append_printf(s, "%02d", p.month);
            break;
        case 'd':
            bson_string_append_printf(s, "%02d", p.day);
            break;
        case 'H':
            bson_string_append_printf(s, "%02d", p.hour);
            break;
        case 'M':
            bson_string_append_printf(s, "%02d", p.minute);
            break;
        case 'S':
            bson_string_append_printf(s, "%02d", p.second);
            break;
        case 'L':
            bson_string_append_printf(s, "%03d", p.ms);
            break;
        case 'j':
            bson_string_append_printf(s, "%03d", p.yday);
            break;
        case 'w':
            bson_string_append_printf(s, "%d", p.wday + 1);
            break;
        case 'u':
            bson_string_append_printf(s, "%d", p.iso_wday);
            break;
        case 'U':
            bson_string_append_printf(s, "%02d", (p.yday - 1 + 7 - p.wday) / 7);
            break;
        case 'V':
            bson_string_append_printf(s, "%02d", p.iso_week);
            break;
        case 'z': {
            int64_t m = off / 60000, a = m < 0 ? -m : m;
            bson_string_append_printf(s, "%c%02lld%02lld", m < 0 ? '-' : '+', (long long)(a / 60),
                                      (long long)(a % 60));
            break;
        }
        case 'Z': {
            int64_t m = off / 60000;
            bson_string_append_printf(s, "%c%03lld", m < 0 ? '-' : '+',
                                      (long long)(m < 0 ? -m : m));
            break;
        }
        case '%':
            bson_string_append(s, "%");
            break;
        default:
            break;
        }
    }
}

void
expr_date_iso_string(int64_t ms, char *buf, size_t len)
{
    static const char fmt[] = "%Y-%m-%dT%H:%M:%S.%LZ";
    bson_string_t *s = bson_string_new(NULL);
    tz_t utc = {0, NULL};
    format_date(fmt, sizeof(fmt) - 1, ms, &utc, s);
    snprintf(buf, len, "%s", s->str);
    bson_string_free(s, true);
}

/*
 * The 'format' (args[1], optional; a string of valid specifiers) and 'timezone' (args[2])
 * arguments $dateToString and $dateFromString share. 'code' is the operator's error for a
 * non-string format. *f is left missing when no format was given.
 */
static int
eval_format_and_tz(const shl_expr_t *e, const shl_expr_ctx_t *ctx, int code, const char *op,
                   bson_value_t *f, tz_t *tz, bool *tznull, shl_status_t *st)
{
    int ret = 0;

    SHL_ERR(expr_eval_opt(e->args[1], ctx, f, st));
    if (!expr_nullish(f)) {
        if (f->value_type != BSON_TYPE_UTF8) {
            SHL_FAIL(st, code, "%s requires that 'format' be a string, found: %s", op,
                     expr_type_name(f));
        }
        SHL_ERR(validate_format(f->value.v_utf8.str, f->value.v_utf8.len, st));
    }
    SHL_ERR(eval_tz(e->args[2], ctx, tz, tznull, st));
done:
    return ret;
}

EXPR_FN(expr_op_date_to_string)
{
    static const char deflt[] = "%Y-%m-%dT%H:%M:%S.%LZ";
    bson_value_t d, f;
    int64_t ms;
    tz_t tz;
    bool tznull = false;
    bson_string_t *s = NULL;
    int ret = 0;
    expr_value_missing(&d);
    expr_value_missing(&f);
    SHL_ERR(shl_expr_evaluate(e->args[0], ctx, &d, st));
    SHL_ERR(eval_format_and_tz(e, ctx, 18533, "$dateToString", &f, &tz, &tznull, st));
    if (expr_nullish(&d)) {
        if (e->args[3] != NULL) {
            ret = shl_expr_evaluate(e->args[3], ctx, out, st);
        } else {
            expr_value_null(out);
        }
        goto done;
    }
    if (tznull || (e->args[1] != NULL && expr_nullish(&f))) {
        expr_value_null(out);
        goto done;
    }
    if (!expr_value_as_date(&d, &ms)) {
        SHL_FAIL(st, QC_COERCE_DATE, "can't convert from BSON type %s to Date", expr_type_name(&d));
    }
    s = bson_string_new(NULL);
    if (e->args[1] != NULL) {
        format_date(f.value.v_utf8.str, f.value.v_utf8.len, ms, &tz, s);
    } else {
        format_date(deflt, sizeof(deflt) - 1, ms, &tz, s);
    }
    expr_value_utf8(out, s->str, s->len);
done:
    if (s != NULL) {
        bson_string_free(s, true);
    }
    bson_value_destroy(&d);
    bson_value_destroy(&f);
    return ret;
}

/* ---- $dateFromString: args [dateString, format, timezone, onNull, onError] ---- */

EXPR_PARSE(expr_parse_date_from_string)
{
    static const char *const keys[] = {"dateString", "format", "timezone", "onNull", "onError"};
    int ret = 0;
    SHL_ERR(expr_parse_named(op, arg, keys, 5, e, 40540, 40541, st));
    if (e->args[0] == NULL) {
        SHL_FAIL(st, 40542, "Missing 'dateString' parameter to $dateFromString");
    }
done:
    return ret;
}

static bool
digits(const char **p, int n, int *out)
{
    int v = 0;
    for (int i = 0; i < n; i++) {
        if (!isdigit((unsigned char)(*p)[i])) {
            return false;
        }
        v = v * 10 + ((*p)[i] - '0');
    }
    *p += n;
    *out = v;
    return true;
}

typedef struct dparse {
    int year, month, day, hour, minute, second, ms;
    bool has_off;
    int64_t off;
} dparse_t;

static int64_t
dparse_ms(const dparse_t *d, const tz_t *tz)
{
    int64_t days = days_from_civil(d->year, d->month, d->day);
    int64_t local =
        days * MS_PER_DAY + d->hour * 3600000LL + d->minute * 60000LL + d->second * 1000LL + d->ms;
    return d->has_off ? local - d->off : (int64_t)tz_to_utc(tz, local);
}

static bool
parse_tail_offset(const char **p, dparse_t *d)
{
    const char *s = *p;
    if (*s == 'Z') {
        d->has_off = true;
        d->off = 0;
        *p = s + 1;
        return true;
    }
    if (*s == '+' || *s == '-') {
        char buf[8] = {0};
        size_t n = strspn(s + 1, "0123456789:");
        if (n > 5) {
            return false;
        }
        buf[0] = *s;
        memcpy(buf + 1, s + 1, n);
        if (!parse_offset(buf, &d->off)) {
            return false;
        }
        d->has_off = true;
        *p = s + 1 + n;
        return true;
    }
    return true;
}

bool
expr_date_parse_iso(const char *s, int64_t *ms)
{
    dparse_t d = {1970, 1, 1, 0, 0, 0, 0, false, 0};
    const char *p = s;
    if (!digits(&p, 4, &d.year)) {
        return false;
    }
    if (*p == '-') {
        p++;
    }
    if (!digits(&p, 2, &d.month)) {
        return false;
    }
    if (*p == '-') {
        p++;
    }
    if (!digits(&p, 2, &d.day)) {
        return false;
    }
    if (*p == 'T' || *p == ' ') {
        p++;
        if (!digits(&p, 2, &d.hour) || *p++ != ':' || !digits(&p, 2, &d.minute)) {
            return false;
        }
        if (*p == ':') {
            p++;
            if (!digits(&p, 2, &d.second)) {
                return false;
            }
            if (*p == '.') {
                int n = 0, frac = 0;
                p++;
                while (isdigit((unsigned char)*p)) {
                    if (n < 3) {
                        frac = frac * 10 + (*p - '0');
                    }
                    n++;
                    p++;
                }
                if (n == 0) {
                    return false;
                }
                for (int i = n; i < 3; i++) {
                    frac *= 10;
                }
                d.ms = frac;
            }
        }
        if (!parse_tail_offset(&p, &d)) {
            return false;
        }
    }
    if (*p != '\0' || d.month < 1 || d.month > 12 || d.day < 1 || d.day > 31 || d.hour > 23 ||
        d.minute > 59 || d.second > 59) {
        return false;
    }
    {
        tz_t utc = {0, NULL};
        *ms = dparse_ms(&d, &utc);
    }
    return true;
}

/* Parse with an explicit format; false on mismatch. */
static bool
parse_with_format(const char *s, const char *f, const tz_t *tz, int64_t *ms)
{
    dparse_t d = {1970, 1, 1, 0, 0, 0, 0, false, 0};
    const char *p = s;
    for (; *f != '\0'; f++) {
        if (*f != '%') {
            if (*p++ != *f) {
                return false;
            }
            continue;
        }
        f++;
        switch (*f) {
        case 'Y':
            if (!digits(&p, 4, &d.year)) {
                return false;
            }
            break;
        case 'm':
            if (!digits(&p, 2, &d.month)) {
                return false;
            }
            break;
        case 'b':
        case 'B': {
            int found = 0;
            for (int k = 0; k < 12 && !found; k++) {
                size_t l = *f == 'b' ? 3 : strlen(month_names[k]);
                if (strncasecmp(p, month_names[k], l) == 0) {
                    d.month = k + 1;
                    p += l;
                    found = 1;
                }
            }
            if (!found) {
                return false;
            }
            break;
        }
        case 'd':
            if (!digits(&p, 2, &d.day)) {
                return false;
            }
            break;
        case 'H':
            if (!digits(&p, 2, &d.hour)) {
                return false;
            }
            break;
        case 'M':
            if (!digits(&p, 2, &d.minute)) {
                return false;
            }
            break;
        case 'S':
            if (!digits(&p, 2, &d.second)) {
                return false;
            }
            break;
        case 'L': {
            int n = 0, frac = 0;
            while (isdigit((unsigned char)*p) && n < 3) {
                frac = frac * 10 + (*p++ - '0');
                n++;
            }
            if (n == 0) {
                return false;
            }
            for (int i = n; i < 3; i++) {
                frac *= 10;
            }
            d.ms = frac;
            break;
        }
        case 'z':
        case 'Z':
            if (!parse_tail_offset(&p, &d)) {
                return false;
            }
            break;
        case '%':
            if (*p++ != '%') {
                return false;
            }
            break;
        default:
            return false;
        }
    }
    if (*p != '\0' || d.month < 1 || d.month > 12 || d.day < 1 || d.day > 31 || d.hour > 23 ||
        d.minute > 59 || d.second > 59) {
        return false;
    }
    *ms = dparse_ms(&d, tz);
    return true;
}

EXPR_FN(expr_op_date_from_string)
{
    bson_value_t s, f;
    int64_t ms = 0;
    tz_t tz;
    bool tznull = false, ok;
    int ret = 0;
    expr_value_missing(&s);
    expr_value_missing(&f);
    SHL_ERR(shl_expr_evaluate(e->args[0], ctx, &s, st));
    SHL_ERR(eval_format_and_tz(e, ctx, 40684, "$dateFromString", &f, &tz, &tznull, st));
    if (expr_nullish(&s)) {
        if (e->args[3] != NULL) {
            ret = shl_expr_evaluate(e->args[3], ctx, out, st);
        } else {
            expr_value_null(out);
        }
        goto done;
    }
    if (s.value_type != BSON_TYPE_UTF8) {
        if (e->args[4] != NULL) {
            ret = shl_expr_evaluate(e->args[4], ctx, out, st);
            goto done;
        }
        SHL_FAIL(st, SHL_CODE_CONVERSION_FAILURE,
                 "$dateFromString requires that 'dateString' be a string, found: %s",
                 expr_type_name(&s));
    }
    if (tznull || (e->args[1] != NULL && expr_nullish(&f))) {
        expr_value_null(out);
        goto done;
    }
    if (e->args[1] != NULL) {
        ok = parse_with_format(s.value.v_utf8.str, f.value.v_utf8.str, &tz, &ms);
    } else {
        ok = expr_date_parse_iso(s.value.v_utf8.str, &ms);
        if (ok && strpbrk(s.value.v_utf8.str + 10, "Z+-") == NULL) {
            /* no offset in the string: it is wall-clock time in 'timezone' */
            ms = (int64_t)tz_to_utc(&tz, ms);
        }
    }
    if (!ok) {
        if (e->args[4] != NULL) {
            ret = shl_expr_evaluate(e->args[4], ctx, out, st);
            goto done;
        }
        SHL_FAIL(st, SHL_CODE_CONVERSION_FAILURE, "Error parsing date string '%s'",
                 s.value.v_utf8.str);
    }
    expr_value_date(out, ms);
done:
    bson_value_destroy(&s);
    bson_value_destroy(&f);
    return ret;
}

/* ---- units ---- */

typedef enum { U_MS, U_SEC, U_MIN, U_HOUR, U_DAY, U_WEEK, U_MONTH, U_QUARTER, U_YEAR } unit_t;

static int
parse_unit(const bson_value_t *v, const char *opname, unit_t *u, shl_status_t *st)
{
    static const char *const names[] = {"millisecond", "second", "minute",  "hour", "day",
                                        "week",        "month",  "quarter", "year"};
    if (v->value_type != BSON_TYPE_UTF8) {
        return shl_status_set(st, 5439013, "%s requires 'unit' to be a string, but got %s", opname,
                              expr_type_name(v));
    }
    for (int i = 0; i < 9; i++) {
        if (strcmp(v->value.v_utf8.str, names[i]) == 0) {
            *u = (unit_t)i;
            return 0;
        }
    }
    return shl_status_set(st, SHL_CODE_FAILED_TO_PARSE,
                          "%s parameter 'unit' value parsing failed :: caused by :: unknown time "
                          "unit value: %s",
                          opname, v->value.v_utf8.str);
}

static int64_t
unit_ms(unit_t u)
{
    static const int64_t ms[] = {1, 1000, 60000, 3600000, MS_PER_DAY, 7 * MS_PER_DAY};
    return u <= U_WEEK ? ms[u] : 0;
}

/* Add months keeping the day clamped to the month's length, in local time. */
static bool
add_months(int64_t ms, const tz_t *tz, int64_t months, int64_t *out)
{
    parts_t p;
    int64_t y, m, days, dim;
    i128 local;
    static const int mdays[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    to_parts(ms, tz_off(tz, ms), &p);
    if (months > 12 * 300000 || months < -12 * 300000) {
        return false;
    }
    m = p.month - 1 + months;
    y = p.year + floor_div(m, 12);
    m = m - floor_div(m, 12) * 12 + 1;
    dim = mdays[m - 1] + (m == 2 && is_leap(y));
    days = days_from_civil(y, (int)m, p.day > dim ? (int)dim : p.day);
    local = (i128)days * MS_PER_DAY + p.hour * 3600000LL + p.minute * 60000LL + p.second * 1000LL +
            p.ms;
    return fits64(tz_to_utc(tz, local), out);
}

static bool
date_add(int64_t ms, unit_t u, int64_t amount, const tz_t *tz, int64_t *out)
{
    int64_t delta;
    if (u >= U_MONTH) {
        int64_t mult = u == U_MONTH ? 1 : (u == U_QUARTER ? 3 : 12), months;
        if (__builtin_mul_overflow(amount, mult, &months)) {
            return false;
        }
        return add_months(ms, tz, months, out);
    }
    if ((u == U_DAY || u == U_WEEK) && tz->zone != NULL) {
        /* calendar days in the zone: the wall-clock time is kept across DST changes */
        i128 local = (i128)ms + tz_off(tz, ms) + (i128)amount * unit_ms(u);
        return fits64(tz_to_utc(tz, local), out);
    }
    if (__builtin_mul_overflow(amount, unit_ms(u), &delta) ||
        __builtin_add_overflow(ms, delta, out)) {
        return false;
    }
    return true;
}

/* $dateAdd / $dateSubtract: args [startDate, unit, amount, timezone]. */
EXPR_PARSE(expr_parse_date_add)
{
    static const char *const keys[] = {"startDate", "unit", "amount", "timezone"};
    int ret = 0;
    bson_t view;
    bson_iter_t it;
    if (arg->value_type != BSON_TYPE_DOCUMENT) {
        e->args = bson_malloc0(4 * sizeof(shl_expr_t *));
        e->nargs = 4;
        SHL_FAIL(st, 5166400, "%s expects an object as its argument", op->name);
    }
    query_bson_view(arg, &view);
    bson_iter_init(&it, &view);
    while (shl_iter_next(&it)) {
        bool known = false;
        for (int i = 0; i < 4; i++) {
            known = known || strcmp(shl_iter_key(&it), keys[i]) == 0;
        }
        if (!known) {
            e->args = bson_malloc0(4 * sizeof(shl_expr_t *));
            e->nargs = 4;
            SHL_FAIL(st, 5166401, "Unrecognized argument to %s: %s", op->name, shl_iter_key(&it));
        }
    }
    SHL_ERR(expr_parse_named(op, arg, keys, 4, e, 5166400, 5166401, st));
    if (e->args[0] == NULL || e->args[1] == NULL || e->args[2] == NULL) {
        SHL_FAIL(st, 5166402, "%s requires startDate, unit, and amount to be present", op->name);
    }
done:
    return ret;
}

static int
date_add_common(const shl_expr_t *e, const shl_expr_ctx_t *ctx, bson_value_t *out, shl_status_t *st,
                bool subtract)
{
    const char *name = e->op->name;
    bson_value_t v[3];
    int64_t ms, amount, r;
    tz_t tz;
    bool tznull = false;
    unit_t u;
    int ret = 0;
    for (int i = 0; i < 3; i++) {
        expr_value_missing(&v[i]);
    }
    for (int i = 0; i < 3; i++) {
        SHL_ERR(shl_expr_evaluate(e->args[i], ctx, &v[i], st));
    }
    if (expr_nullish(&v[0]) || expr_nullish(&v[1]) || expr_nullish(&v[2])) {
        expr_value_null(out);
        goto done;
    }
    SHL_ERR(parse_unit(&v[1], name, &u, st));
    SHL_ERR(eval_tz(e->args[3], ctx, &tz, &tznull, st));
    if (tznull) {
        expr_value_null(out);
        goto done;
    }
    if (!expr_value_as_date(&v[0], &ms)) {
        SHL_FAIL(st, 5166403, "%s requires startDate to be convertible to a date", name);
    }
    if (!expr_integral64(&v[2], &amount)) {
        SHL_FAIL(st, 5166405, "%s expects integer amount of time units", name);
    }
    if (subtract) {
        if (amount == INT64_MIN) {
            SHL_FAIL(st, 6045000, "invalid $dateSubtract 'amount' parameter value: %lld",
                     (long long)amount);
        }
        amount = -amount;
    }
    if (!date_add(ms, u, amount, &tz, &r)) {
        SHL_FAIL(st, 5166406, "%s overflowed", subtract ? "dateSubtract" : "dateAdd");
    }
    expr_value_date(out, r);
done:
    for (int i = 0; i < 3; i++) {
        bson_value_destroy(&v[i]);
    }
    return ret;
}

EXPR_FN(expr_op_date_add)
{
    return date_add_common(e, ctx, out, st, false);
}

EXPR_FN(expr_op_date_subtract)
{
    return date_add_common(e, ctx, out, st, true);
}

/* ---- $dateDiff: args [startDate, endDate, unit, timezone, startOfWeek] ---- */

EXPR_PARSE(expr_parse_date_diff)
{
    static const char *const keys[] = {"startDate", "endDate", "unit", "timezone", "startOfWeek"};
    int ret = 0;
    SHL_ERR(expr_parse_named(op, arg, keys, 5, e, 5166301, 5166302, st));
    if (e->args[0] == NULL) {
        SHL_FAIL(st, 5166303, "Missing 'startDate' parameter to $dateDiff");
    }
    if (e->args[1] == NULL) {
        SHL_FAIL(st, 5166304, "Missing 'endDate' parameter to $dateDiff");
    }
    if (e->args[2] == NULL) {
        SHL_FAIL(st, 5166305, "Missing 'unit' parameter to $dateDiff");
    }
done:
    return ret;
}

static int
start_of_week(const bson_value_t *v, const char *opname, int *dow, shl_status_t *st)
{
    static const char *const names[] = {"sunday",   "monday", "tuesday", "wednesday",
                                        "thursday", "friday", "saturday"};
    static const char *const shortn[] = {"sun", "mon", "tue", "wed", "thu", "fri", "sat"};
    if (v->value_type == BSON_TYPE_UTF8) {
        for (int i = 0; i < 7; i++) {
            if (strcasecmp(v->value.v_utf8.str, names[i]) == 0 ||
                strcasecmp(v->value.v_utf8.str, shortn[i]) == 0) {
                *dow = i;
                return 0;
            }
        }
    }
    if (v->value_type != BSON_TYPE_UTF8) {
        return shl_status_set(st, 5439015, "%s requires 'startOfWeek' to be a string, but got %s",
                              opname, expr_type_name(v));
    }
    return shl_status_set(st, 5439016,
                          "%s parameter 'startOfWeek' value cannot be recognized as a day of a "
                          "week: %s",
                          opname, v->value.v_utf8.str);
}

/* Number of unit boundaries crossed between two instants (MongoDB's dateDiff). */
static i128
diff_units(int64_t a, int64_t b, unit_t u, const tz_t *tz, int sow)
{
    parts_t pa, pb;
    int64_t offa = tz_off(tz, a), offb = tz_off(tz, b);
    to_parts(a, offa, &pa);
    to_parts(b, offb, &pb);
    switch (u) {
    case U_YEAR:
        return pb.year - pa.year;
    case U_QUARTER:
        return (pb.year * 4 + (pb.month - 1) / 3) - (pa.year * 4 + (pa.month - 1) / 3);
    case U_MONTH:
        return (pb.year * 12 + pb.month) - (pa.year * 12 + pa.month);
    case U_WEEK: {
        int64_t wa = floor_div(pa.days - ((pa.wday - sow + 7) % 7) + 3, 7);
        int64_t wb = floor_div(pb.days - ((pb.wday - sow + 7) % 7) + 3, 7);
        return wb - wa;
    }
    case U_DAY:
        return pb.days - pa.days;
    default:
        return floor_div128((i128)b + offb, unit_ms(u)) - floor_div128((i128)a + offa, unit_ms(u));
    }
}

EXPR_FN(expr_op_date_diff)
{
    bson_value_t v[3], sw;
    int64_t a, b;
    tz_t tz;
    int sow = 0;
    bool tznull = false;
    unit_t u;
    int ret = 0;
    expr_value_missing(&sw);
    for (int i = 0; i < 3; i++) {
        expr_value_missing(&v[i]);
    }
    for (int i = 0; i < 3; i++) {
        SHL_ERR(shl_expr_evaluate(e->args[i], ctx, &v[i], st));
    }
    SHL_ERR(eval_tz(e->args[3], ctx, &tz, &tznull, st));
    SHL_ERR(expr_eval_opt(e->args[4], ctx, &sw, st));
    if (expr_nullish(&v[0]) || expr_nullish(&v[1]) || expr_nullish(&v[2]) || tznull ||
        (e->args[4] != NULL && expr_nullish(&sw))) {
        expr_value_null(out);
        goto done;
    }
    if (!expr_value_as_date(&v[0], &a)) {
        SHL_FAIL(st, 5166307, "$dateDiff requires 'startDate' to be a date, but got %s",
                 expr_type_name(&v[0]));
    }
    if (!expr_value_as_date(&v[1], &b)) {
        SHL_FAIL(st, 5166307, "$dateDiff requires 'endDate' to be a date, but got %s",
                 expr_type_name(&v[1]));
    }
    SHL_ERR(parse_unit(&v[2], "$dateDiff", &u, st));
    if (u == U_WEEK && e->args[4] != NULL) {
        SHL_ERR(start_of_week(&sw, "$dateDiff", &sow, st));
    }
    {
        int64_t d;
        if (!fits64(diff_units(a, b, u, &tz, sow), &d)) {
            SHL_FAIL(st, 5166308, "dateDiff overflowed");
        }
        expr_value_int64(out, d);
    }
done:
    for (int i = 0; i < 3; i++) {
        bson_value_destroy(&v[i]);
    }
    bson_value_destroy(&sw);
    return ret;
}

/* ---- $dateTrunc: args [date, unit, binSize, timezone, startOfWeek] ---- */

EXPR_PARSE(expr_parse_date_trunc)
{
    static const char *const keys[] = {"date", "unit", "binSize", "timezone", "startOfWeek"};
    int ret = 0;
    SHL_ERR(expr_parse_named(op, arg, keys, 5, e, 5439007, 5439008, st));
    if (e->args[0] == NULL) {
        SHL_FAIL(st, 5439009, "$dateTrunc requires 'date' to be specified");
    }
    if (e->args[1] == NULL) {
        SHL_FAIL(st, 5439010, "$dateTrunc requires 'unit' to be specified");
    }
done:
    return ret;
}

EXPR_FN(expr_op_date_trunc)
{
    bson_value_t v[3], sw;
    int64_t off, ms, bin = 1, r;
    tz_t tz;
    int sow = 0;
    bool tznull = false;
    unit_t u;
    int ret = 0;
    expr_value_missing(&sw);
    for (int i = 0; i < 3; i++) {
        expr_value_missing(&v[i]);
    }
    for (int i = 0; i < 3; i++) {
        SHL_ERR(expr_eval_opt(e->args[i], ctx, &v[i], st));
    }
    SHL_ERR(eval_tz(e->args[3], ctx, &tz, &tznull, st));
    SHL_ERR(expr_eval_opt(e->args[4], ctx, &sw, st));
    if (expr_nullish(&v[0]) || expr_nullish(&v[1]) || (e->args[2] != NULL && expr_nullish(&v[2])) ||
        tznull || (e->args[4] != NULL && expr_nullish(&sw))) {
        expr_value_null(out);
        goto done;
    }
    if (!expr_value_as_date(&v[0], &ms)) {
        SHL_FAIL(st, 5439012, "$dateTrunc requires 'date' to be a date, but got %s",
                 expr_type_name(&v[0]));
    }
    SHL_ERR(parse_unit(&v[1], "$dateTrunc", &u, st));
    if (e->args[2] != NULL) {
        if (!expr_integral64(&v[2], &bin)) {
            SHL_FAIL(st, 5439017,
                     "$dateTrunc requires 'binSize' to be a 64-bit integer, but got %s",
                     expr_type_name(&v[2]));
        }
        if (bin <= 0) {
            SHL_FAIL(st, 5439018,
                     "$dateTrunc requires 'binSize' to be greater than 0, but got %lld",
                     (long long)bin);
        }
    }
    if (u == U_WEEK && e->args[4] != NULL) {
        SHL_ERR(start_of_week(&sw, "$dateTrunc", &sow, st));
    }
    {
        /* Bins are counted from a reference instant: 2000-01-01T00:00 local (a Saturday) for
         * calendar units, shifted to the start of week for weeks; the epoch otherwise. */
        int64_t ref_days = days_from_civil(2000, 1, 1);
        i128 local, res;
        off = tz_off(&tz, ms);
        local = (i128)ms + off;
        if (u <= U_HOUR) {
            i128 width = (i128)unit_ms(u) * bin, refms = (i128)ref_days * MS_PER_DAY;
            res = tz_to_utc(&tz, refms + floor_div128(local - refms, width) * width);
        } else if (u == U_DAY || u == U_WEEK) {
            i128 days = floor_div128(local, MS_PER_DAY), step = (i128)(u == U_DAY ? 1 : 7) * bin;
            int64_t ref = ref_days;
            if (u == U_WEEK) {
                int refw = (int)(((ref % 7) + 7 + 4) % 7);
                ref -= (refw - sow + 7) % 7;
            }
            res = tz_to_utc(&tz, (ref + floor_div128(days - ref, step) * step) * MS_PER_DAY);
        } else {
            parts_t p;
            i128 months, width, k, ky;
            to_parts(ms, off, &p);
            months = (i128)(p.year - 2000) * 12 + (p.month - 1);
            width = (i128)(u == U_MONTH ? 1 : (u == U_QUARTER ? 3 : 12)) * bin;
            k = floor_div128(months, width) * width;
            ky = floor_div128(k, 12);
            if (ky > 400000000 || ky < -400000000) {
                SHL_FAIL(st, 5439000, "dateTrunc overflowed");
            }
            res = tz_to_utc(&tz,
                            (i128)days_from_civil(2000 + (int64_t)ky, (int)(k - ky * 12 + 1), 1) *
                                MS_PER_DAY);
        }
        if (!fits64(res, &r)) {
            SHL_FAIL(st, 5439000, "dateTrunc overflowed");
        }
    }
    expr_value_date(out, r);
done:
    for (int i = 0; i < 3; i++) {
        bson_value_destroy(&v[i]);
    }
    bson_value_destroy(&sw);
    return ret;
}

/* ---- for the window stages (window.c): $dateAdd's units and arithmetic in UTC ---- */

int
query_date_unit(const char *name)
{
    static const char *const names[] = {"millisecond", "second", "minute",  "hour", "day",
                                        "week",        "month",  "quarter", "year"};
    int ret = -1;

    for (int i = 0; i < 9; i++) {
        if (strcmp(name, names[i]) == 0) {
            ret = i;
        }
    }
    return ret;
}

bool
query_date_add_utc(int64_t ms, int unit, int64_t amount, int64_t *out)
{
    tz_t utc = {0, NULL};
    return date_add(ms, (unit_t)unit, amount, &utc, out);
}
