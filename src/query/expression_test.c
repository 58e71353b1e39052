/*
 * expression_test.c -- table-driven cases for the core aggregation expressions:
 * (document, expression, expected value or error code).
 */
#include <string.h>

#include "base/unit_test.h"
#include "query/expression.h"

typedef struct ecase {
    const char *doc;
    const char *expr; /* {'e': <expression>} */
    const char *want; /* {'v': <value>} or "{}" for missing */
    int code;
} ecase_t;

static const ecase_t cases[] = {
    {"{'a': 1}", "{'e': '$a'}", "{'v': 1}", 0},
    {"{'a': {'b': 2}}", "{'e': '$a.b'}", "{'v': 2}", 0},
    {"{'a': [{'b': 1}, {'c': 1}, {'b': 3}, 5]}", "{'e': '$a.b'}", "{'v': [1, 3]}", 0},
    {"{'a': 1}", "{'e': '$nope'}", "{}", 0},
    {"{'a': 1}", "{'e': '$$ROOT'}", "{'v': {'a': 1}}", 0},
    {"{'a': 1}", "{'e': '$$CURRENT.a'}", "{'v': 1}", 0},
    {"{'a': 1}", "{'e': '$$REMOVE'}", "{}", 0},
    {"{'a': 1}", "{'e': 'lit'}", "{'v': 'lit'}", 0},
    {"{'a': 1}", "{'e': {'$literal': '$a'}}", "{'v': '$a'}", 0},
    {"{'a': 1}", "{'e': {'x': '$a', 'y': [1, '$a', '$nope']}}",
     "{'v': {'x': 1, 'y': [1, 1, null]}}", 0},
    {"{'a': 1}", "{'e': {'$eq': ['$a', 1.0]}}", "{'v': true}", 0},
    {"{'a': 1}", "{'e': {'$ne': ['$a', 1]}}", "{'v': false}", 0},
    {"{'a': 1}", "{'e': {'$gt': ['$a', null]}}", "{'v': true}", 0},
    {"{}", "{'e': {'$lt': ['$a', null]}}", "{'v': true}", 0},
    {"{'a': 'x'}", "{'e': {'$gt': ['$a', 5]}}", "{'v': true}", 0},
    {"{'a': 2}", "{'e': {'$cmp': ['$a', 5]}}", "{'v': -1}", 0},
    {"{'a': 2}", "{'e': {'$and': [true, '$a']}}", "{'v': true}", 0},
    {"{'a': 0}", "{'e': {'$and': [true, '$a']}}", "{'v': false}", 0},
    {"{'a': 0}", "{'e': {'$or': [false, '$a']}}", "{'v': false}", 0},
    {"{'a': 0}", "{'e': {'$not': ['$a']}}", "{'v': true}", 0},
    {"{'a': []}", "{'e': {'$not': ['$a']}}", "{'v': false}", 0},
    {"{'a': 1}", "{'e': {'$cond': [{'$eq': ['$a', 1]}, 'yes', 'no']}}", "{'v': 'yes'}", 0},
    {"{'a': 2}", "{'e': {'$cond': {'if': {'$eq': ['$a', 1]}, 'then': 'yes', 'else': 'no'}}}",
     "{'v': 'no'}", 0},
    {"{'a': null}", "{'e': {'$ifNull': ['$a', '$b', 7]}}", "{'v': 7}", 0},
    {"{'a': 1, 'b': 2}", "{'e': {'$add': ['$a', '$b', 0.5]}}", "{'v': 3.5}", 0},
    {"{'a': 2147483647}", "{'e': {'$add': ['$a', 1]}}", "{'v': {'$numberLong': '2147483648'}}", 0},
    {"{'a': 1}", "{'e': {'$add': ['$a', null]}}", "{'v': null}", 0},
    {"{}", "{'e': {'$add': [{'$numberDecimal': '0.5'}, 1]}}", "{'v': {'$numberDecimal': '1.5'}}",
     0},
    {"{}", "{'e': {'$multiply': [{'$numberDecimal': '2'}, 3]}}", "{'v': {'$numberDecimal': '6'}}",
     0},
    {"{'a': 3}", "{'e': {'$multiply': ['$a', 4]}}", "{'v': 12}", 0},
    {"{'a': 'x'}", "{'e': {'$concat': ['$a', 'y']}}", "{'v': 'xy'}", 0},
    {"{'a': [1, 2]}", "{'e': {'$size': '$a'}}", "{'v': 2}", 0},
    {"{'a': 'x'}", "{'e': {'$add': ['$a', 1]}}", NULL, 16554},
    {"{'a': 'x'}", "{'e': {'$size': '$a'}}", NULL, 17124},
    /* ---- arithmetic ---- */
    {"{'a': 7, 'b': 2}", "{'e': {'$subtract': ['$a', '$b']}}", "{'v': 5}", 0},
    {"{'a': 7.5}", "{'e': {'$subtract': ['$a', 1]}}", "{'v': 6.5}", 0},
    {"{'d': {'$date': '2021-01-01T00:00:01Z'}}", "{'e': {'$subtract': ['$d', 1000]}}",
     "{'v': {'$date': '2021-01-01T00:00:00Z'}}", 0},
    {"{'d': {'$date': '2021-01-01T00:00:01Z'}, 'c': {'$date': '2021-01-01T00:00:00Z'}}",
     "{'e': {'$subtract': ['$d', '$c']}}", "{'v': {'$numberLong': '1000'}}", 0},
    {"{}", "{'e': {'$subtract': ['$x', 1]}}", "{'v': null}", 0},
    {"{}", "{'e': {'$subtract': ['a', 1]}}", NULL, 16556},
    {"{}", "{'e': {'$subtract': [1]}}", NULL, 16020},
    {"{}", "{'e': {'$divide': [9, 2]}}", "{'v': 4.5}", 0},
    {"{}", "{'e': {'$divide': [9, 0]}}", NULL, 16608},
    {"{}", "{'e': {'$divide': ['x', 1]}}", NULL, 16609},
    {"{}", "{'e': {'$divide': [null, 1]}}", "{'v': null}", 0},
    {"{}", "{'e': {'$mod': [7, 3]}}", "{'v': 1}", 0},
    {"{}", "{'e': {'$mod': [-7, 3]}}", "{'v': -1}", 0},
    {"{}", "{'e': {'$mod': [7.5, 2]}}", "{'v': 1.5}", 0},
    {"{}", "{'e': {'$mod': [7, 0]}}", NULL, 16610},
    {"{}", "{'e': {'$mod': ['a', 2]}}", NULL, 16611},
    {"{}", "{'e': {'$abs': -3}}", "{'v': 3}", 0},
    {"{}", "{'e': {'$abs': -2.5}}", "{'v': 2.5}", 0},
    {"{}", "{'e': {'$abs': null}}", "{'v': null}", 0},
    {"{}", "{'e': {'$abs': 'x'}}", NULL, 28765},
    {"{}", "{'e': {'$abs': {'$numberLong': '-9223372036854775808'}}}", NULL, 28680},
    {"{}", "{'e': {'$ceil': 1.2}}", "{'v': 2.0}", 0},
    {"{}", "{'e': {'$floor': -1.2}}", "{'v': -2.0}", 0},
    {"{}", "{'e': {'$floor': 5}}", "{'v': 5}", 0},
    {"{}", "{'e': {'$ceil': 'x'}}", NULL, 28765},
    {"{}", "{'e': {'$round': [2.5]}}", "{'v': 2.0}", 0},
    {"{}", "{'e': {'$round': [3.5]}}", "{'v': 4.0}", 0},
    {"{}", "{'e': {'$round': [1234.5678, 2]}}", "{'v': 1234.57}", 0},
    {"{}", "{'e': {'$round': [1234, -2]}}", "{'v': 1200}", 0},
    {"{}", "{'e': {'$round': [1250, -2]}}", "{'v': 1200}", 0},
    {"{}", "{'e': {'$trunc': [1234.5678, 1]}}", "{'v': 1234.5}", 0},
    {"{}", "{'e': {'$trunc': [-1.7]}}", "{'v': -1.0}", 0},
    {"{}", "{'e': {'$round': [1, 101]}}", NULL, 51083},
    {"{}", "{'e': {'$round': [1, 2, 3]}}", NULL, 28667},
    {"{}", "{'e': {'$sum': []}}", "{'v': 0}", 0},
    {"{}", "{'e': {'$round': ['x']}}", NULL, 51081},
    {"{}", "{'e': {'$trunc': [1.5, 1.5]}}", NULL, 51082},
    {"{}", "{'e': {'$pow': [2, 10]}}", "{'v': 1024}", 0},
    {"{}", "{'e': {'$pow': [2, 40]}}", "{'v': {'$numberLong': '1099511627776'}}", 0},
    {"{}", "{'e': {'$pow': [2, -1]}}", "{'v': 0.5}", 0},
    {"{}", "{'e': {'$pow': [0, -1]}}", NULL, 28764},
    {"{}", "{'e': {'$pow': ['a', 1]}}", NULL, 28762},
    {"{}", "{'e': {'$sqrt': 16}}", "{'v': 4.0}", 0},
    {"{}", "{'e': {'$sqrt': -1}}", NULL, 28714},
    {"{}", "{'e': {'$exp': 0}}", "{'v': 1.0}", 0},
    {"{}", "{'e': {'$ln': 1}}", "{'v': 0.0}", 0},
    {"{}", "{'e': {'$ln': 0}}", NULL, 28766},
    {"{}", "{'e': {'$log': [100, 10]}}", "{'v': 2.0}", 0},
    {"{}", "{'e': {'$log': [100, 1]}}", NULL, 28759},
    {"{}", "{'e': {'$log': [-1, 10]}}", NULL, 28758},
    {"{}", "{'e': {'$log10': 1000}}", "{'v': 3.0}", 0},
    {"{}", "{'e': {'$log10': -5}}", NULL, 28761},
    {"{}",
     "{'e': {'$add': [{'$date': '2021-01-01T00:00:00Z'}, {'$date': '2021-01-01T00:00:00Z'}]}}",
     NULL, 16612},
    /* ---- variables, conditionals ---- */
    {"{'a': 2}",
     "{'e': {'$let': {'vars': {'x': '$a', 'y': 3}, 'in': {'$multiply': ['$$x', '$$y']}}}}",
     "{'v': 6}", 0},
    {"{}", "{'e': {'$let': {'vars': {'x': '$nope'}, 'in': {'$ifNull': ['$$x', 'dflt']}}}}",
     "{'v': 'dflt'}", 0},
    {"{}", "{'e': {'$let': {'vars': {'x': {'a': 1}}, 'in': '$$x.a'}}}", "{'v': 1}", 0},
    {"{}", "{'e': {'$let': {'vars': {'x': 1}, 'in': {'$let': {'vars': {'x': 2}, 'in': '$$x'}}}}}",
     "{'v': 2}", 0},
    {"{}", "{'e': {'$let': {'vars': {'X': 1}, 'in': 1}}}", NULL, 16867},
    {"{}", "{'e': {'$let': {'vars': {'x': 1}}}}", NULL, 16877},
    {"{}", "{'e': {'$let': {'in': 1}}}", NULL, 16876},
    {"{}", "{'e': {'$let': {'vars': {}, 'in': 1, 'z': 1}}}", NULL, 16875},
    {"{}", "{'e': {'$let': {'vars': {}, 'in': '$$undefinedvar'}}}", NULL, 17276},
    {"{'a': 5}",
     "{'e': {'$switch': {'branches': [{'case': {'$lt': ['$a', 3]}, 'then': 'low'}, {'case': "
     "{'$lt': ['$a', 10]}, 'then': 'mid'}], 'default': 'high'}}}",
     "{'v': 'mid'}", 0},
    {"{'a': 50}", "{'e': {'$switch': {'branches': [{'case': false, 'then': 1}], 'default': 2}}}",
     "{'v': 2}", 0},
    {"{}", "{'e': {'$switch': {'branches': [{'case': false, 'then': 1}]}}}", NULL, 40066},
    {"{}", "{'e': {'$switch': {'branches': []}}}", NULL, 40068},
    {"{}", "{'e': {'$switch': {'branches': [{'case': true}]}}}", NULL, 40065},
    {"{}", "{'e': {'$switch': {'branches': [1]}}}", NULL, 40062},
    {"{}", "{'e': {'$switch': 1}}", NULL, 40060},
    {"{}", "{'e': {'$cond': {'then': 1, 'else': 2}}}", NULL, 17080},
    {"{}", "{'e': {'$cond': {'if': 1, 'then': 1, 'else': 2, 'x': 1}}}", NULL, 17083},
    {"{}", "{'e': {'$ifNull': [null, null]}}", "{'v': null}", 0},
    /* ---- strings ---- */
    {"{'s': 'hello'}", "{'e': {'$substr': ['$s', 1, 3]}}", "{'v': 'ell'}", 0},
    {"{'s': 'hello'}", "{'e': {'$substrBytes': ['$s', 1, -1]}}", "{'v': 'ello'}", 0},
    {"{}", "{'e': {'$substr': [null, 0, 2]}}", "{'v': ''}", 0},
    {"{}", "{'e': {'$substr': [12345, 1, 2]}}", "{'v': '23'}", 0},
    {"{'s': 'hello'}", "{'e': {'$substrBytes': ['$s', -1, 2]}}", NULL, 50752},
    {"{'s': 'hello'}", "{'e': {'$substrBytes': ['$s', 'a', 2]}}", NULL, 16034},
    {"{'s': 'h\u00e9llo'}", "{'e': {'$substrBytes': ['$s', 2, 2]}}", NULL, 28656},
    {"{'s': 'h\u00e9llo'}", "{'e': {'$substrCP': ['$s', 1, 2]}}", "{'v': '\u00e9l'}", 0},
    {"{'s': 'abc'}", "{'e': {'$substrCP': ['$s', 1, -1]}}", NULL, 34454},
    {"{'s': 'abc'}", "{'e': {'$substrCP': ['$s', 1.5, 1]}}", NULL, 34451},
    {"{'s': 'abc'}", "{'e': {'$substrCP': ['$s', 10, 1]}}", "{'v': ''}", 0},
    {"{'s': 'AbC'}", "{'e': {'$toLower': '$s'}}", "{'v': 'abc'}", 0},
    {"{'s': 'AbC'}", "{'e': {'$toUpper': '$s'}}", "{'v': 'ABC'}", 0},
    {"{}", "{'e': {'$toUpper': '$s'}}", "{'v': ''}", 0},
    {"{}", "{'e': {'$toUpper': [[1]]}}", NULL, 16007},
    {"{}", "{'e': {'$split': ['a,b,,c', ',']}}", "{'v': ['a', 'b', '', 'c']}", 0},
    {"{}", "{'e': {'$split': [null, ',']}}", "{'v': null}", 0},
    {"{}", "{'e': {'$split': ['abc', '']}}", NULL, 40087},
    {"{}", "{'e': {'$split': [1, ',']}}", NULL, 40085},
    {"{}", "{'e': {'$strLenCP': 'h\u00e9'}}", "{'v': 2}", 0},
    {"{}", "{'e': {'$strLenBytes': 'h\u00e9'}}", "{'v': 3}", 0},
    {"{}", "{'e': {'$strLenCP': null}}", NULL, 34471},
    {"{}", "{'e': {'$strLenBytes': 1}}", NULL, 34473},
    {"{}", "{'e': {'$indexOfBytes': ['hello', 'l']}}", "{'v': 2}", 0},
    {"{}", "{'e': {'$indexOfBytes': ['hello', 'l', 3]}}", "{'v': 3}", 0},
    {"{}", "{'e': {'$indexOfBytes': ['hello', 'z']}}", "{'v': -1}", 0},
    {"{}", "{'e': {'$indexOfBytes': [null, 'z']}}", "{'v': null}", 0},
    {"{}", "{'e': {'$indexOfBytes': ['hello', 'l', -1]}}", NULL, 40097},
    {"{}", "{'e': {'$indexOfCP': ['h\u00e9llo', 'l']}}", "{'v': 2}", 0},
    {"{}", "{'e': {'$indexOfCP': ['abc', 1]}}", NULL, 40094},
    {"{}", "{'e': {'$trim': {'input': '  ab  '}}}", "{'v': 'ab'}", 0},
    {"{}", "{'e': {'$ltrim': {'input': 'xxabxx', 'chars': 'x'}}}", "{'v': 'abxx'}", 0},
    {"{}", "{'e': {'$rtrim': {'input': 'xxabxy', 'chars': 'xy'}}}", "{'v': 'xxab'}", 0},
    {"{}", "{'e': {'$trim': {'input': null}}}", "{'v': null}", 0},
    {"{}", "{'e': {'$trim': {'input': 1}}}", NULL, 50699},
    {"{}", "{'e': {'$trim': {}}}", NULL, 50695},
    {"{}", "{'e': {'$trim': {'k': 1}}}", NULL, 50694},
    {"{}", "{'e': {'$trim': 'x'}}", NULL, 50696},
    {"{}", "{'e': {'$regexMatch': {'input': 'Hello', 'regex': '^h', 'options': 'i'}}}",
     "{'v': true}", 0},
    {"{}", "{'e': {'$regexMatch': {'input': null, 'regex': 'a'}}}", "{'v': false}", 0},
    {"{}", "{'e': {'$regexFind': {'input': 'abc123', 'regex': '([0-9])([0-9])'}}}",
     "{'v': {'match': '12', 'idx': 3, 'captures': ['1', '2']}}", 0},
    {"{}", "{'e': {'$regexFind': {'input': 'abc', 'regex': 'z'}}}", "{'v': null}", 0},
    {"{}", "{'e': {'$regexFindAll': {'input': 'a1b2', 'regex': '[0-9]'}}}",
     "{'v': [{'match': '1', 'idx': 1, 'captures': []}, {'match': '2', 'idx': 3, 'captures': []}]}",
     0},
    {"{}", "{'e': {'$regexFindAll': {'input': 'ab', 'regex': ''}}}",
     "{'v': [{'match': '', 'idx': 0, 'captures': []}, {'match': '', 'idx': 1, 'captures': []}]}",
     0},
    {"{}", "{'e': {'$regexMatch': {'input': 'a', 'regex': '('}}}", NULL, 51111},
    {"{}", "{'e': {'$regexMatch': {'input': 1, 'regex': 'a'}}}", NULL, 51104},
    {"{}", "{'e': {'$regexMatch': {'input': 'a'}}}", NULL, 31023},
    {"{}",
     "{'e': {'$regexMatch': {'input': 'a', 'regex': {'$regex': 'a', '$options': 'i'}, "
     "'options': 'm'}}}",
     NULL, 51107},
    {"{}", "{'e': {'$replaceOne': {'input': 'aXbXc', 'find': 'X', 'replacement': '-'}}}",
     "{'v': 'a-bXc'}", 0},
    {"{}", "{'e': {'$replaceAll': {'input': 'aXbXc', 'find': 'X', 'replacement': '-'}}}",
     "{'v': 'a-b-c'}", 0},
    {"{}", "{'e': {'$replaceAll': {'input': null, 'find': 'X', 'replacement': '-'}}}",
     "{'v': null}", 0},
    {"{}", "{'e': {'$replaceAll': {'input': 'a', 'find': 1, 'replacement': '-'}}}", NULL, 51745},
    {"{}", "{'e': {'$replaceOne': {'input': 'a', 'find': 'a'}}}", NULL, 51747},
    {"{}", "{'e': {'$replaceAll': {'input': 'ab', 'find': '', 'replacement': '-'}}}",
     "{'v': '-a-b-'}", 0},
    {"{}", "{'e': {'$replaceOne': {'input': 'ab', 'find': '', 'replacement': '-'}}}",
     "{'v': '-ab'}", 0},
    {"{}", "{'e': {'$replaceAll': {'input': 'aaa', 'find': 'aa', 'replacement': 'b'}}}",
     "{'v': 'ba'}", 0},
    {"{}", "{'e': {'$split': ['a--b--', '--']}}", "{'v': ['a', 'b', '']}", 0},
    {"{}", "{'e': {'$indexOfBytes': ['abcabc', 'bc', 2, 6]}}", "{'v': 4}", 0},
    {"{}", "{'e': {'$indexOfBytes': ['abcabc', 'bc', 2, 5]}}", "{'v': -1}", 0},
    {"{}", "{'e': {'$indexOfCP': ['\u00e9a\u00e9b', '\u00e9b', 1]}}", "{'v': 2}", 0},
    {"{}", "{'e': {'$indexOfCP': ['\u00e9a\u00e9b', '\u00e9b', 0, 2]}}", "{'v': -1}", 0},
    {"{}", "{'e': {'$strcasecmp': ['abc', 'ABC']}}", "{'v': 0}", 0},
    {"{}", "{'e': {'$strcasecmp': ['abc', 'abd']}}", "{'v': -1}", 0},
    {"{}", "{'e': {'$strcasecmp': ['b', null]}}", "{'v': 1}", 0},
    {"{}", "{'e': {'$strcasecmp': [[1], 'a']}}", NULL, 16007},
    /* ---- arrays ---- */
    {"{'a': [1, 2, 3]}", "{'e': {'$arrayElemAt': ['$a', -1]}}", "{'v': 3}", 0},
    {"{'a': [1, 2, 3]}", "{'e': {'$arrayElemAt': ['$a', 5]}}", "{}", 0},
    {"{}", "{'e': {'$arrayElemAt': ['$a', 0]}}", "{'v': null}", 0},
    {"{}", "{'e': {'$arrayElemAt': [1, 0]}}", NULL, 28689},
    {"{}", "{'e': {'$arrayElemAt': [[1], 0.5]}}", NULL, 28691},
    {"{'a': [1, 2, 3]}", "{'e': {'$first': '$a'}}", "{'v': 1}", 0},
    {"{'a': [1, 2, 3]}", "{'e': {'$last': '$a'}}", "{'v': 3}", 0},
    {"{'a': []}", "{'e': {'$last': '$a'}}", "{}", 0},
    {"{}", "{'e': {'$first': 1}}", NULL, 28689},
    {"{'a': [1, 2, 3, 4]}",
     "{'e': {'$filter': {'input': '$a', 'as': 'x', 'cond': {'$gt': ['$$x', 2]}}}}", "{'v': [3, 4]}",
     0},
    {"{'a': [1, 2, 3, 4]}",
     "{'e': {'$filter': {'input': '$a', 'cond': {'$gt': ['$$this', 1]}, 'limit': 2}}}",
     "{'v': [2, 3]}", 0},
    {"{}", "{'e': {'$filter': {'input': null, 'cond': true}}}", "{'v': null}", 0},
    {"{}", "{'e': {'$filter': {'input': 1, 'cond': true}}}", NULL, 28651},
    {"{}", "{'e': {'$filter': {'input': [1], 'cond': true, 'limit': 0}}}", NULL, 327392},
    {"{}", "{'e': {'$filter': {'input': [1]}}}", NULL, 28650},
    {"{}", "{'e': {'$filter': {'input': [1], 'cond': true, 'as': 'Bad'}}}", NULL, 16867},
    {"{'a': [1, 2]}", "{'e': {'$map': {'input': '$a', 'as': 'x', 'in': {'$add': ['$$x', 1]}}}}",
     "{'v': [2, 3]}", 0},
    {"{'a': [{'b': 1}, {}]}", "{'e': {'$map': {'input': '$a', 'in': '$$this.b'}}}",
     "{'v': [1, null]}", 0},
    {"{}", "{'e': {'$map': {'input': 'x', 'in': 1}}}", NULL, 16883},
    {"{}", "{'e': {'$map': {'input': [1]}}}", NULL, 16882},
    {"{}", "{'e': {'$map': {'input': [1], 'in': 1, 'bad': 1}}}", NULL, 16879},
    {"{'a': [1, 2, 3]}",
     "{'e': {'$reduce': {'input': '$a', 'initialValue': 0, 'in': {'$add': ['$$value', "
     "'$$this']}}}}",
     "{'v': 6}", 0},
    {"{}",
     "{'e': {'$reduce': {'input': [[1], [2]], 'initialValue': [], 'in': {'$concatArrays': "
     "['$$value', '$$this']}}}}",
     "{'v': [1, 2]}", 0},
    {"{}", "{'e': {'$reduce': {'input': null, 'initialValue': 0, 'in': 1}}}", "{'v': null}", 0},
    {"{}", "{'e': {'$reduce': {'input': 1, 'initialValue': 0, 'in': 1}}}", NULL, 40080},
    {"{}", "{'e': {'$reduce': {'input': [1], 'in': 1}}}", NULL, 40078},
    {"{}", "{'e': {'$in': [2, [1, 2]]}}", "{'v': true}", 0},
    {"{}", "{'e': {'$in': [null, [1]]}}", "{'v': false}", 0},
    {"{}", "{'e': {'$in': [1, 'x']}}", NULL, 40081},
    {"{}", "{'e': {'$slice': [[1, 2, 3, 4], 2]}}", "{'v': [1, 2]}", 0},
    {"{}", "{'e': {'$slice': [[1, 2, 3, 4], -2]}}", "{'v': [3, 4]}", 0},
    {"{}", "{'e': {'$slice': [[1, 2, 3, 4], 1, 2]}}", "{'v': [2, 3]}", 0},
    {"{}", "{'e': {'$slice': [[1, 2, 3, 4], -3, 2]}}", "{'v': [2, 3]}", 0},
    {"{}", "{'e': {'$slice': [null, 1]}}", "{'v': null}", 0},
    {"{}", "{'e': {'$slice': [[1], 0, 0]}}", NULL, 28729},
    {"{}", "{'e': {'$slice': [1, 1]}}", NULL, 28724},
    {"{}", "{'e': {'$concatArrays': [[1], [2, 3]]}}", "{'v': [1, 2, 3]}", 0},
    {"{}", "{'e': {'$concatArrays': [[1], null]}}", "{'v': null}", 0},
    {"{}", "{'e': {'$concatArrays': [[1], 2]}}", NULL, 28664},
    {"{}", "{'e': {'$reverseArray': [[1, 2, 3]]}}", "{'v': [3, 2, 1]}", 0},
    {"{}", "{'e': {'$reverseArray': null}}", "{'v': null}", 0},
    {"{}", "{'e': {'$reverseArray': 1}}", NULL, 34435},
    {"{}", "{'e': {'$range': [0, 5]}}", "{'v': [0, 1, 2, 3, 4]}", 0},
    {"{}", "{'e': {'$range': [5, 0, -2]}}", "{'v': [5, 3, 1]}", 0},
    {"{}", "{'e': {'$range': [0, 5, -1]}}", "{'v': []}", 0},
    {"{}", "{'e': {'$range': [0, 5, 0]}}", NULL, 34449},
    {"{}", "{'e': {'$range': ['a', 5]}}", NULL, 34443},
    {"{}", "{'e': {'$range': [0, 2147483647]}}", NULL, 146},
    {"{}", "{'e': {'$indexOfArray': [[1, 2, 3, 2], 2]}}", "{'v': 1}", 0},
    {"{}", "{'e': {'$indexOfArray': [[1, 2, 3, 2], 2, 2]}}", "{'v': 3}", 0},
    {"{}", "{'e': {'$indexOfArray': [[1, 2], 5]}}", "{'v': -1}", 0},
    {"{}", "{'e': {'$indexOfArray': [null, 5]}}", "{'v': null}", 0},
    {"{}", "{'e': {'$indexOfArray': [1, 5]}}", NULL, 40090},
    {"{}", "{'e': {'$isArray': [[1]]}}", "{'v': true}", 0},
    {"{}", "{'e': {'$isArray': '$nope'}}", "{'v': false}", 0},
    {"{}", "{'e': {'$zip': {'inputs': [[1, 2], ['a', 'b', 'c']]}}}", "{'v': [[1, 'a'], [2, 'b']]}",
     0},
    {"{}",
     "{'e': {'$zip': {'inputs': [[1], ['a', 'b']], 'useLongestLength': true, 'defaults': [0, "
     "'z']}}}",
     "{'v': [[1, 'a'], [0, 'b']]}", 0},
    {"{}", "{'e': {'$zip': {'inputs': [[1], null]}}}", "{'v': null}", 0},
    {"{}", "{'e': {'$zip': {'inputs': [1]}}}", NULL, 34468},
    {"{}", "{'e': {'$zip': {'inputs': [[1]], 'defaults': [1]}}}", NULL, 34466},
    {"{}", "{'e': {'$arrayToObject': [[['a', 1], ['b', 2]]]}}", "{'v': {'a': 1, 'b': 2}}", 0},
    {"{}", "{'e': {'$arrayToObject': [[{'k': 'a', 'v': 1}, {'k': 'a', 'v': 2}]]}}",
     "{'v': {'a': 2}}", 0},
    {"{}", "{'e': {'$arrayToObject': null}}", "{'v': null}", 0},
    {"{}", "{'e': {'$arrayToObject': [[['a', 1, 2]]]}}", NULL, 40397},
    {"{}", "{'e': {'$arrayToObject': [[1]]}}", NULL, 40398},
    {"{}", "{'e': {'$objectToArray': {'a': 1, 'b': 2}}}",
     "{'v': [{'k': 'a', 'v': 1}, {'k': 'b', 'v': 2}]}", 0},
    {"{}", "{'e': {'$objectToArray': [[1]]}}", NULL, 40390},
    {"{}", "{'e': {'$sortArray': {'input': [3, 1, 2], 'sortBy': 1}}}", "{'v': [1, 2, 3]}", 0},
    {"{}", "{'e': {'$sortArray': {'input': [{'a': 2}, {'a': 1}], 'sortBy': {'a': -1}}}}",
     "{'v': [{'a': 2}, {'a': 1}]}", 0},
    {"{}", "{'e': {'$sortArray': {'input': 1, 'sortBy': 1}}}", NULL, 2942504},
    {"{}", "{'e': {'$sortArray': {'input': [1]}}}", NULL, 2942503},
    {"{}", "{'e': {'$size': [[1, 2, 3]]}}", "{'v': 3}", 0},
    /* ---- sets ---- */
    {"{}", "{'e': {'$setUnion': [[3, 1], [2, 1]]}}", "{'v': [1, 2, 3]}", 0},
    {"{}", "{'e': {'$setUnion': [[1], null]}}", "{'v': null}", 0},
    {"{}", "{'e': {'$setUnion': [[1], 1]}}", NULL, 17043},
    {"{}", "{'e': {'$setIntersection': [[1, 2, 3], [3, 2, 5]]}}", "{'v': [2, 3]}", 0},
    {"{}", "{'e': {'$setIntersection': [[1], 'x']}}", NULL, 17047},
    {"{}", "{'e': {'$setDifference': [[1, 2, 2, 3], [3]]}}", "{'v': [1, 2]}", 0},
    {"{}", "{'e': {'$setDifference': [[1], 2]}}", NULL, 17049},
    {"{}", "{'e': {'$setEquals': [[1, 2, 2], [2, 1]]}}", "{'v': true}", 0},
    {"{}", "{'e': {'$setEquals': [[1]]}}", NULL, 17045},
    {"{}", "{'e': {'$setEquals': [[1], 1]}}", NULL, 17044},
    {"{}", "{'e': {'$setIsSubset': [[1], [1, 2]]}}", "{'v': true}", 0},
    {"{}", "{'e': {'$setIsSubset': [[3], [1, 2]]}}", "{'v': false}", 0},
    {"{}", "{'e': {'$setIsSubset': [1, [1, 2]]}}", NULL, 17046},
    {"{}", "{'e': {'$anyElementTrue': [[0, false, 1]]}}", "{'v': true}", 0},
    {"{}", "{'e': {'$allElementsTrue': [[1, true, 0]]}}", "{'v': false}", 0},
    {"{}", "{'e': {'$allElementsTrue': [[]]}}", "{'v': true}", 0},
    {"{}", "{'e': {'$anyElementTrue': 1}}", NULL, 17041},
    /* ---- objects ---- */
    {"{}", "{'e': {'$mergeObjects': [{'a': 1, 'b': 1}, null, {'b': 2, 'c': 3}]}}",
     "{'v': {'a': 1, 'b': 2, 'c': 3}}", 0},
    {"{}", "{'e': {'$mergeObjects': [{'a': 1}, 1]}}", NULL, 40400},
    {"{'a.b': 5, 'x': 1}", "{'e': {'$getField': 'a.b'}}", "{'v': 5}", 0},
    {"{}", "{'e': {'$getField': {'field': 'q', 'input': {'q': 7}}}}", "{'v': 7}", 0},
    {"{}", "{'e': {'$getField': {'field': 'q', 'input': null}}}", "{'v': null}", 0},
    {"{}", "{'e': {'$getField': {'field': 'q', 'input': '$nope'}}}", "{}", 0},
    {"{}", "{'e': {'$getField': {'field': 1}}}", NULL, 5654602},
    {"{'f': 1}", "{'e': {'$getField': {'field': {'$toLower': 'X'}, 'input': {'x': 3}}}}", NULL,
     5654601},
    {"{'$x': 4}", "{'e': {'$getField': {'$literal': '$x'}}}", "{'v': 4}", 0},
    {"{}", "{'e': {'$getField': '$x'}}", NULL, 5654600},
    {"{}", "{'e': {'$setField': {'field': 'b', 'input': {'a': 1}, 'value': 2}}}",
     "{'v': {'a': 1, 'b': 2}}", 0},
    {"{}", "{'e': {'$setField': {'field': 'a', 'input': {'a': 1, 'c': 1}, 'value': '$$REMOVE'}}}",
     "{'v': {'c': 1}}", 0},
    {"{}", "{'e': {'$unsetField': {'field': 'a', 'input': {'a': 1, 'c': 1}}}}", "{'v': {'c': 1}}",
     0},
    {"{}", "{'e': {'$setField': {'field': 'a', 'input': null, 'value': 1}}}", "{'v': null}", 0},
    {"{}", "{'e': {'$setField': {'field': 1, 'input': {}, 'value': 1}}}", NULL, 4161107},
    {"{}", "{'e': {'$setField': {'field': 'a', 'value': 1}}}", NULL, 4161109},
    {"{}", "{'e': {'$setField': {'field': 'a', 'input': 5, 'value': 1}}}", NULL, 4161105},
    /* ---- dates ---- */
    {"{'d': {'$date': '2021-03-15T10:20:30.456Z'}}",
     "{'e': [{'$year': '$d'}, {'$month': '$d'}, {'$dayOfMonth': '$d'}, {'$hour': '$d'}, "
     "{'$minute': '$d'}, {'$second': '$d'}, {'$millisecond': '$d'}, {'$dayOfWeek': '$d'}, "
     "{'$dayOfYear': '$d'}, {'$week': '$d'}, {'$isoWeek': '$d'}, {'$isoWeekYear': '$d'}, "
     "{'$isoDayOfWeek': '$d'}]}",
     "{'v': [2021, 3, 15, 10, 20, 30, 456, 2, 74, 11, 11, 2021, 1]}", 0},
    {"{'d': {'$date': '2021-01-01T00:00:00Z'}}",
     "{'e': [{'$isoWeek': '$d'}, {'$isoWeekYear': '$d'}, {'$week': '$d'}, {'$isoDayOfWeek': "
     "'$d'}]}",
     "{'v': [53, 2020, 0, 5]}", 0},
    {"{'d': {'$date': '2021-03-15T23:30:00Z'}}",
     "{'e': {'$dayOfMonth': {'date': '$d', 'timezone': '+01:00'}}}", "{'v': 16}", 0},
    {"{'d': {'$date': '2021-03-15T00:30:00Z'}}",
     "{'e': {'$hour': {'date': '$d', 'timezone': '-0230'}}}", "{'v': 22}", 0},
    {"{}", "{'e': {'$year': '$nope'}}", "{'v': null}", 0},
    {"{}", "{'e': {'$year': 'x'}}", NULL, 16006},
    {"{'d': {'$date': '2021-03-15T00:30:00Z'}}",
     "{'e': {'$hour': {'date': '$d', 'timezone': 'Mars/Olympus'}}}", NULL, 40485},
    {"{'d': {'$date': '2021-03-15T00:30:00Z'}}", "{'e': {'$hour': {'date': '$d', 'timezone': 5}}}",
     NULL, 40517},
    {"{}", "{'e': {'$year': {'dt': 1}}}", NULL, 40535},
    /* Olson zones from the system tz database (America/New_York: EST -5, EDT -4) */
    {"{'d': {'$date': '2021-07-01T12:00:00Z'}, 'w': {'$date': '2021-01-01T12:00:00Z'}}",
     "{'e': [{'$hour': {'date': '$d', 'timezone': 'America/New_York'}}, {'$hour': {'date': "
     "'$w', 'timezone': 'America/New_York'}}]}",
     "{'v': [8, 7]}", 0},
    {"{'d': {'$date': '2021-07-01T12:00:00Z'}}",
     "{'e': {'$dateToString': {'date': '$d', 'format': '%H:%M %z %Z', 'timezone': "
     "'America/New_York'}}}",
     "{'v': '08:00 -0400 -240'}", 0},
    {"{}",
     "{'e': {'$dateFromString': {'dateString': '2021-07-01T08:00:00', 'timezone': "
     "'America/New_York'}}}",
     "{'v': {'$date': '2021-07-01T12:00:00Z'}}", 0},
    {"{}",
     "{'e': {'$dateAdd': {'startDate': {'$date': '2021-03-13T12:00:00Z'}, 'unit': 'day', "
     "'amount': 1, 'timezone': 'America/New_York'}}}",
     "{'v': {'$date': '2021-03-14T11:00:00Z'}}", 0},
    {"{}",
     "{'e': {'$dateAdd': {'startDate': {'$date': '2021-03-13T12:00:00Z'}, 'unit': 'hour', "
     "'amount': 24, 'timezone': 'America/New_York'}}}",
     "{'v': {'$date': '2021-03-14T12:00:00Z'}}", 0},
    {"{}",
     "{'e': {'$dateTrunc': {'date': {'$date': '2021-07-01T02:00:00Z'}, 'unit': 'day', "
     "'timezone': 'America/New_York'}}}",
     "{'v': {'$date': '2021-06-30T04:00:00Z'}}", 0},
    {"{'d': {'$date': '2021-03-15T00:30:00Z'}}",
     "{'e': {'$hour': {'date': '$d', 'timezone': '../../etc/passwd'}}}", NULL, 40485},
    {"{'d': {'$date': '2021-03-05T07:08:09.010Z'}}",
     "{'e': {'$dateToString': {'date': '$d', 'format': '%Y/%m/%d %H:%M:%S.%L %j %w %u %U %V "
     "%G %z %Z %%'}}}",
     "{'v': '2021/03/05 07:08:09.010 064 6 5 09 09 2021 +0000 +000 %'}", 0},
    {"{'d': {'$date': '2021-09-05T07:08:09.010Z'}}",
     "{'e': {'$dateToString': {'date': '$d', 'format': '%b %B'}}}", "{'v': 'Sep September'}", 0},
    {"{}", "{'e': {'$dateFromString': {'dateString': '05 sep 2021', 'format': '%d %b %Y'}}}",
     "{'v': {'$date': '2021-09-05T00:00:00Z'}}", 0},
    {"{'d': {'$date': '2021-03-05T07:08:09.010Z'}}", "{'e': {'$dateToString': {'date': '$d'}}}",
     "{'v': '2021-03-05T07:08:09.010Z'}", 0},
    {"{'d': {'$date': '2021-03-05T23:08:09.010Z'}}",
     "{'e': {'$dateToString': {'date': '$d', 'format': '%Y-%m-%d %z', 'timezone': '+05:30'}}}",
     "{'v': '2021-03-06 +0530'}", 0},
    {"{}", "{'e': {'$dateToString': {'date': '$nope', 'onNull': 'none'}}}", "{'v': 'none'}", 0},
    {"{}", "{'e': {'$dateToString': {'date': {'$date': '2021-01-01T00:00:00Z'}, 'format': '%Q'}}}",
     NULL, 18536},
    {"{}", "{'e': {'$dateToString': {'format': '%Y'}}}", NULL, 18628},
    {"{}", "{'e': {'$dateFromString': {'dateString': '2021-03-05T07:08:09.010Z'}}}",
     "{'v': {'$date': '2021-03-05T07:08:09.010Z'}}", 0},
    {"{}", "{'e': {'$dateFromString': {'dateString': '2021-03-05', 'timezone': '+01:00'}}}",
     "{'v': {'$date': '2021-03-04T23:00:00Z'}}", 0},
    {"{}", "{'e': {'$dateFromString': {'dateString': '05/03/2021', 'format': '%d/%m/%Y'}}}",
     "{'v': {'$date': '2021-03-05T00:00:00Z'}}", 0},
    {"{}", "{'e': {'$dateFromString': {'dateString': 'garbage', 'onError': 'bad'}}}",
     "{'v': 'bad'}", 0},
    {"{}", "{'e': {'$dateFromString': {'dateString': null, 'onNull': 0}}}", "{'v': 0}", 0},
    {"{}", "{'e': {'$dateFromString': {'dateString': 'garbage'}}}", NULL, 241},
    {"{}", "{'e': {'$dateFromString': {}}}", NULL, 40542},
    {"{'d': {'$date': '2021-01-31T12:00:00Z'}}",
     "{'e': {'$dateAdd': {'startDate': '$d', 'unit': 'month', 'amount': 1}}}",
     "{'v': {'$date': '2021-02-28T12:00:00Z'}}", 0},
    {"{'d': {'$date': '2021-01-31T12:00:00Z'}}",
     "{'e': {'$dateAdd': {'startDate': '$d', 'unit': 'hour', 'amount': 36}}}",
     "{'v': {'$date': '2021-02-02T00:00:00Z'}}", 0},
    {"{'d': {'$date': '2021-01-31T12:00:00Z'}}",
     "{'e': {'$dateSubtract': {'startDate': '$d', 'unit': 'year', 'amount': 1}}}",
     "{'v': {'$date': '2020-01-31T12:00:00Z'}}", 0},
    {"{}", "{'e': {'$dateAdd': {'startDate': null, 'unit': 'day', 'amount': 1}}}", "{'v': null}",
     0},
    {"{}", "{'e': {'$dateAdd': {'startDate': 'x', 'unit': 'day', 'amount': 1}}}", NULL, 5166403},
    {"{}",
     "{'e': {'$dateAdd': {'startDate': {'$date': '2021-01-01T00:00:00Z'}, 'unit': 'day', "
     "'amount': 1.5}}}",
     NULL, 5166405},
    {"{}",
     "{'e': {'$dateAdd': {'startDate': {'$date': '2021-01-01T00:00:00Z'}, 'unit': 'fortnight', "
     "'amount': 1}}}",
     NULL, 9},
    {"{}", "{'e': {'$dateAdd': {'startDate': 1}}}", NULL, 5166402},
    {"{}",
     "{'e': {'$dateDiff': {'startDate': {'$date': '2020-12-31T23:59:00Z'}, 'endDate': {'$date': "
     "'2021-01-01T00:01:00Z'}, 'unit': 'year'}}}",
     "{'v': {'$numberLong': '1'}}", 0},
    {"{}",
     "{'e': {'$dateDiff': {'startDate': {'$date': '2021-01-01T00:00:00Z'}, 'endDate': {'$date': "
     "'2021-01-03T12:00:00Z'}, 'unit': 'day'}}}",
     "{'v': {'$numberLong': '2'}}", 0},
    {"{}",
     "{'e': {'$dateDiff': {'startDate': {'$date': '2021-01-01T00:00:00Z'}, 'endDate': {'$date': "
     "'2021-01-01T00:00:01.5Z'}, 'unit': 'millisecond'}}}",
     "{'v': {'$numberLong': '1500'}}", 0},
    {"{}", "{'e': {'$dateDiff': {'startDate': 1, 'endDate': 2, 'unit': 'day'}}}", NULL, 5166307},
    {"{}", "{'e': {'$dateDiff': {'startDate': 1, 'unit': 'day'}}}", NULL, 5166304},
    {"{}", "{'e': {'$dateTrunc': {'date': {'$date': '2021-03-15T10:20:30Z'}, 'unit': 'month'}}}",
     "{'v': {'$date': '2021-03-01T00:00:00Z'}}", 0},
    {"{}",
     "{'e': {'$dateTrunc': {'date': {'$date': '2021-03-15T10:20:30Z'}, 'unit': 'hour', "
     "'binSize': 6}}}",
     "{'v': {'$date': '2021-03-15T06:00:00Z'}}", 0},
    {"{}",
     "{'e': {'$dateTrunc': {'date': {'$date': '2021-03-17T10:20:30Z'}, 'unit': 'week', "
     "'startOfWeek': 'monday'}}}",
     "{'v': {'$date': '2021-03-15T00:00:00Z'}}", 0},
    {"{}", "{'e': {'$dateTrunc': {'date': null, 'unit': 'day'}}}", "{'v': null}", 0},
    {"{}",
     "{'e': {'$dateTrunc': {'date': {'$date': '2021-03-15T10:20:30Z'}, 'unit': 'day', "
     "'binSize': 0}}}",
     NULL, 5439018},
    /* ---- types ---- */
    {"{}", "{'e': {'$toInt': '42'}}", "{'v': 42}", 0},
    {"{}", "{'e': {'$toInt': 42.9}}", "{'v': 42}", 0},
    {"{}", "{'e': {'$toInt': '4.5'}}", NULL, 241},
    {"{}", "{'e': {'$toInt': 3e10}}", NULL, 241},
    {"{}", "{'e': {'$toInt': null}}", "{'v': null}", 0},
    {"{}", "{'e': {'$toLong': {'$date': '1970-01-01T00:00:01Z'}}}",
     "{'v': {'$numberLong': '1000'}}", 0},
    {"{}", "{'e': {'$toDouble': '2.5'}}", "{'v': 2.5}", 0},
    {"{}", "{'e': {'$toDouble': '0x1A'}}", NULL, 241},
    {"{}", "{'e': {'$toDouble': true}}", "{'v': 1.0}", 0},
    {"{}", "{'e': {'$toDecimal': '1.10'}}", "{'v': {'$numberDecimal': '1.10'}}", 0},
    {"{}", "{'e': {'$toDecimal': 7}}", "{'v': {'$numberDecimal': '7'}}", 0},
    {"{}", "{'e': {'$toString': 0.1}}", "{'v': '0.1'}", 0},
    {"{}", "{'e': {'$toString': {'$divide': [1, 3]}}}", "{'v': '0.333333'}", 0},
    {"{}", "{'e': {'$toString': -0.0}}", "{'v': '-0'}", 0},
    {"{}", "{'e': {'$toString': true}}", "{'v': 'true'}", 0},
    {"{}", "{'e': {'$toString': {'$date': '2021-03-05T07:08:09.010Z'}}}",
     "{'v': '2021-03-05T07:08:09.010Z'}", 0},
    {"{}", "{'e': {'$toString': {'$oid': '5f1d7a0b2c9a4e0b8c6d1e2f'}}}",
     "{'v': '5f1d7a0b2c9a4e0b8c6d1e2f'}", 0},
    {"{}", "{'e': {'$toString': [[1]]}}", NULL, 241},
    {"{}", "{'e': {'$toBool': 0}}", "{'v': false}", 0},
    {"{}", "{'e': {'$toBool': 'false'}}", "{'v': true}", 0},
    {"{}", "{'e': {'$toObjectId': '5f1d7a0b2c9a4e0b8c6d1e2f'}}",
     "{'v': {'$oid': '5f1d7a0b2c9a4e0b8c6d1e2f'}}", 0},
    {"{}", "{'e': {'$toObjectId': 'nope'}}", NULL, 241},
    {"{}", "{'e': {'$toDate': '2021-03-05T07:08:09Z'}}", "{'v': {'$date': '2021-03-05T07:08:09Z'}}",
     0},
    {"{}", "{'e': {'$toDate': {'$numberLong': '1000'}}}",
     "{'v': {'$date': '1970-01-01T00:00:01Z'}}", 0},
    {"{}", "{'e': {'$toDate': 1}}", NULL, 241},
    {"{}", "{'e': {'$convert': {'input': 'x', 'to': 'int', 'onError': -1}}}", "{'v': -1}", 0},
    {"{}", "{'e': {'$convert': {'input': null, 'to': 'int', 'onNull': 0}}}", "{'v': 0}", 0},
    {"{}", "{'e': {'$convert': {'input': '5', 'to': 16}}}", "{'v': 5}", 0},
    {"{}", "{'e': {'$convert': {'input': '5', 'to': 'nosuch'}}}", NULL, 2},
    {"{}", "{'e': {'$convert': {'input': '5'}}}", NULL, 9},
    {"{}", "{'e': {'$convert': {'input': 5, 'to': 'int', 'x': 1}}}", NULL, 9},
    {"{}", "{'e': {'$isNumber': [1]}}", "{'v': true}", 0},
    {"{}", "{'e': {'$isNumber': ['1']}}", "{'v': false}", 0},
    {"{}", "{'e': {'$toHashedIndexKey': 1}}", "{'v': {'$numberLong': '5902408780260971510'}}", 0},
    {"{}", "{'e': {'$toHashedIndexKey': 1.0}}", "{'v': {'$numberLong': '5902408780260971510'}}", 0},
    {"{'a': [1, 2.5, 'x']}", "{'e': {'$sum': '$a'}}", "{'v': 3.5}", 0},
    {"{'a': [1, 2, 3]}", "{'e': {'$avg': '$a'}}", "{'v': 2.0}", 0},
    {"{'a': [1, null, 3]}", "{'e': [{'$max': '$a'}, {'$min': '$a'}, {'$max': [1, 5, 2]}]}",
     "{'v': [3, 1, 5]}", 0},
    {"{}", "{'e': {'$sum': '$nope'}}", "{'v': 0}", 0},
    {"{}", "{'e': {'$ifNull': [1]}}", NULL, 1257300},
    {"{}", "{'e': {'$toInt': [1, 2]}}", NULL, 50723},
    {"{}", "{'e': {'$lt': [{'$rand': {}}, 1]}}", "{'v': true}", 0},
    {"{}", "{'e': {'$rand': {'a': 1}}}", NULL, 3040501},
    {"{}", "{'e': {'$rand': 1}}", NULL, 10065},
    {"{}", "{'e': {'$getField': {'field': 'a', 'k': 1}}}", NULL, 3041701},
    {"{}", "{'e': {'a': 1, 'b.c': 2}}", NULL, 16412},
    {"{}", "{'e': {'a': 1, '$b': 2}}", NULL, 16410},
    {"{}", "{'e': {'a': 1, 'a': 2}}", NULL, 16406},
    /* one error per remaining operator */
    {"{}", "{'e': {'$floor': 'x'}}", NULL, 28765},
    {"{}", "{'e': {'$exp': 'x'}}", NULL, 28765},
    {"{}", "{'e': {'$sqrt': [true]}}", NULL, 28765},
    {"{}", "{'e': {'$toLower': [{'a': 1}]}}", NULL, 16007},
    {"{}", "{'e': {'$regexFindAll': {'input': 'a', 'regex': 'a', 'options': 'q'}}}", NULL, 51108},
    {"{}", "{'e': {'$regexFind': {'regex': 'a'}}}", NULL, 31022},
    {"{}", "{'e': {'$ltrim': {'input': 'a', 'chars': 1}}}", NULL, 50700},
    {"{}", "{'e': {'$last': 'x'}}", NULL, 28689},
    {"{}", "{'e': {'$isArray': [1, 2]}}", NULL, 16020},
    {"{}", "{'e': {'$allElementsTrue': 'x'}}", NULL, 17040},
    {"{}", "{'e': {'$unsetField': {'field': 'a'}}}", NULL, 4161109},
    {"{}", "{'e': {'$objectToArray': {'$literal': 1}}}", NULL, 40390},
    {"{}",
     "{'e': {'$dateSubtract': {'startDate': {'$date': '2021-01-01T00:00:00Z'}, 'unit': 'day', "
     "'amount': 'x'}}}",
     NULL, 5166405},
    {"{}", "{'e': {'$dateSubtract': {'startDate': 1, 'unit': 'day', 'amount': 1, 'x': 1}}}", NULL,
     5166401},
    {"{}", "{'e': {'$toLong': 'abc'}}", NULL, 241},
    {"{}", "{'e': {'$toDecimal': 'abc'}}", NULL, 241},
    {"{}", "{'e': {'$toBool': [1, 2]}}", NULL, 50723},
    {"{}", "{'e': {'$isNumber': []}}", NULL, 16020},
    {"{}", "{'e': {'$toHashedIndexKey': [1, 2]}}", NULL, 16020},
    {"{}", "{'e': {'$convert': {'input': 1, 'to': 'minKey'}}}", NULL, 241},
    {"{}", "{'e': {'$convert': {'input': 1, 'to': 'bool', 'onError': 0}}}", "{'v': true}", 0},
    {"{}", "{'e': {'$toObjectId': null}}", "{'v': null}", 0},
    {"{}", "{'e': {'$toBool': '$nope'}}", "{'v': null}", 0},
    {"{}", "{'e': {'$toDouble': {'$date': '1970-01-01T00:00:01Z'}}}", "{'v': 1000.0}", 0},
    /* ---- bounded on malformed input ---- */
    {"{}", "{'e': {'$add': [{'$concat': ['a']}, {'$divide': [1, 0]}]}}", NULL, 16608},
    {"{}",
     "{'e': {'$dateTrunc': {'date': {'$date': {'$numberLong': '-9223372036854775808'}}, 'unit': "
     "'year', 'binSize': {'$numberLong': '9223372036854775807'}}}}",
     NULL, 5439000},
    {"{}",
     "{'e': {'$dateTrunc': {'date': {'$date': '2021-03-17T10:20:30Z'}, 'unit': 'week', "
     "'startOfWeek': 'someday'}}}",
     NULL, 5439016},
    {"{}",
     "{'e': {'$dateDiff': {'startDate': {'$date': {'$numberLong': '-9223372036854775808'}}, "
     "'endDate': {'$date': {'$numberLong': '9223372036854775807'}}, 'unit': 'millisecond'}}}",
     NULL, 5166308},
    {"{}",
     "{'e': {'$reduce': {'input': {'$range': [0, 40]}, 'initialValue': 'ab', 'in': "
     "{'$concat': ['$$value', '$$value']}}}}",
     NULL, 13548},
    {"{}",
     "{'e': {'$reduce': {'input': {'$range': [0, 3000000]}, 'initialValue': [], 'in': "
     "{'$concatArrays': ['$$value', ['$$this']]}}}}",
     NULL, 146},
    {"{}", "{'e': {'$substrCP': ['abc', 0, 2147483647]}}", "{'v': 'abc'}", 0},
    {"{}", "{'e': {'$substrBytes': ['abc', 0, -5]}}", "{'v': 'abc'}", 0},
    {"{}", "{'e': {'$map': [1, 2]}}", NULL, 16878},
    {"{}", "{'e': {'$filter': [1]}}", NULL, 28646},
    {"{}", "{'e': {'$dateToString': [1]}}", NULL, 18629},
    {"{}", "{'e': {'$zip': [1]}}", NULL, 34460},
    {"{}",
     "{'e': {'$reduce': {'input': {'$range': [0, 40]}, 'initialValue': [1], 'in': "
     "{'$concatArrays': ['$$value', '$$value']}}}}",
     NULL, 13548},
    {"{}", "{'e': {'$foo': 1}}", NULL, 168},
    {"{}", "{'e': {'$eq': [1, 2, 3]}}", NULL, 16020},
    {"{}", "{'e': '$'}", NULL, 16872},
    {"{}", "{'e': '$a..b'}", NULL, 15998},
    {"{}", "{'e': '$$nope'}", NULL, 17276},
    {"{}", "{'e': '$$Bad'}", NULL, 17276},
    {"{}", "{'e': {'$eq': [1, 1], '$ne': [1, 1]}}", NULL, 15983},
    {"{}", "{'e': {'$cond': {'if': true, 'then': 1}}}", NULL, 17082},
};

SHL_TEST(expression_table)
{
    int failures = 0;
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const ecase_t *c = &cases[i];
        bson_t *doc = shl_test_bson(c->doc), *spec = shl_test_bson(c->expr), got = BSON_INITIALIZER;
        shl_expr_t *e = NULL;
        shl_expr_ctx_t ctx = {0};
        shl_status_t st = SHL_STATUS_INIT;
        bson_value_t v = {0};
        bson_iter_t it;
        int rc;
        bson_iter_init_find(&it, spec, "e");
        rc = shl_expr_parse(bson_iter_value(&it), &e, &st);
        if (rc == 0) {
            ctx.root = doc;
            rc = shl_expr_evaluate(e, &ctx, &v, &st);
        }
        if (rc != c->code) {
            shl_test_fail_here(__FILE__, __LINE__, "case %zu %s: code %d want %d (%s)", i, c->expr,
                               rc, c->code, rc ? st.reason : "");
            failures++;
        } else if (rc == 0) {
            char *g, *w;
            if (v.value_type != BSON_TYPE_EOD) {
                bson_append_value(&got, "v", 1, &v);
            }
            if (!shl_test_bson_eq(&got, c->want, &g, &w)) {
                shl_test_fail_here(__FILE__, __LINE__, "case %zu %s: got %s want %s", i, c->expr, g,
                                   w);
                failures++;
            }
            bson_free(g);
            bson_free(w);
        }
        bson_value_destroy(&v);
        bson_destroy(&got);
        shl_expr_destroy(e);
        bson_destroy(doc);
        bson_destroy(spec);
    }
    ASSERT_INT_EQ(failures, 0);
}

/* $type cannot be written in the table: {"$type": ...} is extended JSON to libbson's parser. */
SHL_TEST(expression_type_and_now)
{
    static const struct {
        bson_type_t t;
        const char *name;
    } types[] = {{BSON_TYPE_INT32, "int"},     {BSON_TYPE_INT64, "long"},
                 {BSON_TYPE_DOUBLE, "double"}, {BSON_TYPE_UTF8, "string"},
                 {BSON_TYPE_NULL, "null"},     {BSON_TYPE_EOD, "missing"},
                 {BSON_TYPE_BOOL, "bool"},     {BSON_TYPE_DATE_TIME, "date"}};
    bson_t *doc = shl_test_bson("{'i': 1, 'l': {'$numberLong': '1'}, 'd': 1.5, 's': 'x', "
                                "'n': null, 'b': true, 't': {'$date': '2021-01-01T00:00:00Z'}}");
    static const char *const paths[] = {"$i", "$l", "$d", "$s", "$n", "$nope", "$b", "$t"};
    for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++) {
        bson_t spec = BSON_INITIALIZER;
        bson_value_t sv, v = {0};
        shl_expr_t *e = NULL;
        shl_status_t st = SHL_STATUS_INIT;
        shl_expr_ctx_t ctx = {0};
        bson_iter_t it;
        BSON_APPEND_UTF8(&spec, "$type", paths[i]);
        sv.value_type = BSON_TYPE_DOCUMENT;
        sv.value.v_doc.data = bson_malloc(spec.len);
        memcpy(sv.value.v_doc.data, bson_get_data(&spec), spec.len);
        sv.value.v_doc.data_len = spec.len;
        ASSERT_INT_EQ(shl_expr_parse(&sv, &e, &st), 0);
        bson_free(sv.value.v_doc.data);
        ctx.root = doc;
        ASSERT_INT_EQ(shl_expr_evaluate(e, &ctx, &v, &st), 0);
        ASSERT_INT_EQ(v.value_type, BSON_TYPE_UTF8);
        ASSERT_STR_EQ(v.value.v_utf8.str, types[i].name);
        (void)it;
        bson_value_destroy(&v);
        shl_expr_destroy(e);
        bson_destroy(&spec);
    }
    {
        /* $$NOW is the context's clock, constant within an evaluation. */
        bson_t *spec = shl_test_bson("{'e': {'$eq': ['$$NOW', {'$add': ['$$NOW', 0]}]}}");
        bson_iter_t it;
        shl_expr_t *e = NULL;
        shl_status_t st = SHL_STATUS_INIT;
        shl_expr_ctx_t ctx = {0};
        bool b = false;
        bson_iter_init_find(&it, spec, "e");
        ASSERT_INT_EQ(shl_expr_parse(bson_iter_value(&it), &e, &st), 0);
        ctx.root = doc;
        ctx.now_ms = 1616000000000;
        ASSERT_INT_EQ(shl_expr_evaluate_bool(e, &ctx, &b, &st), 0);
        ASSERT_INT_EQ(b, true);
        shl_expr_destroy(e);
        bson_destroy(spec);
    }
    bson_destroy(doc);
}
