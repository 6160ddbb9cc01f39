/* chat_json.c - Python-style JSON printing for chat templates (see chat_json.h). */
#include "tokenizer/chat_json.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Python repr(float): the shortest digit string that round-trips; fixed notation when the
 * decimal exponent is in [-4, 16), else d.ddde[+-]XX. */
static bool put_number(double d, nx_buf *out, nx_err *err) {
    char buf[64];
    if (isnan(d) || isinf(d)) return nx_buf_append(out, isnan(d) ? "NaN" : d < 0 ? "-Infinity" : "Infinity",
                                                   isnan(d) ? 3 : d < 0 ? 9 : 8, err);
    if (d == floor(d) && fabs(d) < 9007199254740992.0) {
        int n = snprintf(buf, sizeof buf, "%.0f", d);
        if (d == 0 && signbit(d)) n = snprintf(buf, sizeof buf, "0"); /* an integral -0 reads as int 0 */
        return nx_buf_append(out, buf, (size_t)n, err);
    }
    int prec = 1;
    for (; prec <= 17; prec++) {
        snprintf(buf, sizeof buf, "%.*e", prec - 1, d);
        if (strtod(buf, NULL) == d) break;
    }
    /* buf = [-]D[.DDD]e[+-]XX: collect digits and the exponent */
    char digits[32];
    int nd = 0, exp10;
    const char *p = buf;
    bool neg = *p == '-';
    if (neg) p++;
    for (; *p && *p != 'e'; p++)
        if (*p != '.') digits[nd++] = *p;
    exp10 = atoi(p + 1);
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    char res[96];
    int k = 0;
    if (neg) res[k++] = '-';
    if (exp10 >= -4 && exp10 < 16) {
        if (exp10 < 0) {
            res[k++] = '0';
            res[k++] = '.';
            for (int i = 0; i < -exp10 - 1; i++) res[k++] = '0';
            for (int i = 0; i < nd; i++) res[k++] = digits[i];
        } else {
            for (int i = 0; i <= exp10; i++) res[k++] = i < nd ? digits[i] : '0';
            res[k++] = '.';
            if (nd > exp10 + 1)
                for (int i = exp10 + 1; i < nd; i++) res[k++] = digits[i];
            else
                res[k++] = '0';
        }
    } else {
        res[k++] = digits[0];
        if (nd > 1) {
            res[k++] = '.';
            for (int i = 1; i < nd; i++) res[k++] = digits[i];
        }
        k += snprintf(res + k, sizeof res - (size_t)k, "e%c%02d", exp10 < 0 ? '-' : '+', abs(exp10));
    }
    return nx_buf_append(out, res, (size_t)k, err);
}

static bool put_string(const char *s, nx_buf *out, nx_err *err) {
    if (!nx_buf_append(out, "\"", 1, err)) return false;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        char esc[8];
        const char *e = NULL;
        switch (*p) {
        case '"': e = "\\\""; break;
        case '\\': e = "\\\\"; break;
        case '\n': e = "\\n"; break;
        case '\r': e = "\\r"; break;
        case '\t': e = "\\t"; break;
        case '\b': e = "\\b"; break;
        case '\f': e = "\\f"; break;
        default:
            if (*p < 0x20) {
                snprintf(esc, sizeof esc, "\\u%04x", *p);
                e = esc;
            }
        }
        if (!(e ? nx_buf_append(out, e, strlen(e), err) : nx_buf_append(out, p, 1, err))) return false;
    }
    return nx_buf_append(out, "\"", 1, err);
}

static bool dump(const cJSON *v, nx_buf *out, int depth, nx_err *err) {
    if (depth > 64) return nx_fail(err, "JSON nested deeper than 64 levels");
    if (cJSON_IsNull(v)) return nx_buf_append(out, "null", 4, err);
    if (cJSON_IsTrue(v)) return nx_buf_append(out, "true", 4, err);
    if (cJSON_IsFalse(v)) return nx_buf_append(out, "false", 5, err);
    if (cJSON_IsNumber(v)) return put_number(v->valuedouble, out, err);
    if (cJSON_IsString(v)) return put_string(v->valuestring, out, err);
    bool obj = cJSON_IsObject(v);
    if (!obj && !cJSON_IsArray(v)) return nx_fail(err, "unsupported JSON value");
    if (!nx_buf_append(out, obj ? "{" : "[", 1, err)) return false;
    const cJSON *it;
    bool first = true;
    cJSON_ArrayForEach(it, v) {
        if (!first && !nx_buf_append(out, ", ", 2, err)) return false;
        first = false;
        if (obj && (!put_string(it->string, out, err) || !nx_buf_append(out, ": ", 2, err))) return false;
        if (!dump(it, out, depth + 1, err)) return false;
    }
    return nx_buf_append(out, obj ? "}" : "]", 1, err);
}

bool nx_json_dump_py(const cJSON *v, nx_buf *out, nx_err *err) { return dump(v, out, 0, err); }

bool nx_json_str_py(const cJSON *v, nx_buf *out, nx_err *err) {
    if (cJSON_IsString(v)) return nx_buf_append(out, v->valuestring, strlen(v->valuestring), err);
    if (cJSON_IsTrue(v)) return nx_buf_append(out, "True", 4, err);
    if (cJSON_IsFalse(v)) return nx_buf_append(out, "False", 5, err);
    if (cJSON_IsNull(v)) return nx_buf_append(out, "None", 4, err);
    if (cJSON_IsNumber(v)) {
        if (isnan(v->valuedouble)) return nx_buf_append(out, "nan", 3, err);
        if (isinf(v->valuedouble)) return nx_buf_append(out, v->valuedouble < 0 ? "-inf" : "inf", v->valuedouble < 0 ? 4 : 3, err);
        return put_number(v->valuedouble, out, err);
    }
    return nx_json_dump_py(v, out, err);
}
