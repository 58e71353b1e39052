/*
 * validation_error_test.c -- errInfo.details of a failed validation, table-driven: a
 * validator, a document that fails it, and the details MongoDB 5.0+ reports.
 */
#include "base/unit_test.h"
#include "db/db_private.h"

SHL_TEST(validation_error_details)
{
    static const struct {
        const char *validator, *doc, *want;
    } cases[] = {
        {"{'a': {'$gt': 5}}", "{'a': 2}",
         "{'operatorName': '$gt', 'specifiedAs': {'a': {'$gt': 5}}, 'reason': 'comparison "
         "failed', 'consideredValue': 2}"},
        {"{'a': {'$gt': 5}}", "{'a': [1, 2]}",
         "{'operatorName': '$gt', 'specifiedAs': {'a': {'$gt': 5}}, 'reason': 'comparison "
         "failed', 'consideredValues': [1, 2]}"},
        {"{'a': {'$type': 'string'}}", "{'a': [1, 2.5, 3]}",
         "{'operatorName': '$type', 'specifiedAs': {'a': {'$type': 'string'}}, 'reason': 'type "
         "did not match', 'consideredValues': [1, 2.5, 3], 'consideredTypes': ['double', "
         "'int']}"},
        {"{'$nor': [{'a': 1}, {'b': {'$gt': 2}}]}", "{'a': 2, 'b': 3}",
         "{'operatorName': '$nor', 'clausesSatisfied': [{'index': 1, 'details': {'operatorName': "
         "'$gt', 'specifiedAs': {'b': {'$gt': 2}}, 'reason': 'comparison succeeded', "
         "'consideredValue': 3}}]}"},
        {"{'a': {'$not': {'$gt': 5}}}", "{'a': 7}",
         "{'operatorName': '$not', 'details': {'operatorName': '$gt', 'specifiedAs': {'a': "
         "{'$gt': 5}}, 'reason': 'comparison succeeded', 'consideredValue': 7}}"},
        {"{'a': 5}", "{'b': 1}",
         "{'operatorName': '$eq', 'specifiedAs': {'a': 5}, 'reason': 'field was missing'}"},
        {"{'a': {'$gt': 1, '$lt': 3}}", "{'a': 7}",
         "{'operatorName': '$and', 'clausesNotSatisfied': [{'index': 1, 'details': "
         "{'operatorName': '$lt', 'specifiedAs': {'a': {'$lt': 3}}, 'reason': 'comparison "
         "failed', 'consideredValue': 7}}]}"},
        {"{'$or': [{'a': 1}, {'b': {'$exists': true}}]}", "{'a': 2}",
         "{'operatorName': '$or', 'clausesNotSatisfied': [{'index': 0, 'details': "
         "{'operatorName': '$eq', 'specifiedAs': {'a': 1}, 'reason': 'comparison failed', "
         "'consideredValue': 2}}, {'index': 1, 'details': {'operatorName': '$exists', "
         "'specifiedAs': {'b': {'$exists': true}}, 'reason': 'path does not exist'}}]}"},
        {"{'a': {'$in': [1, 2]}}", "{'a': 3}",
         "{'operatorName': '$in', 'specifiedAs': {'a': {'$in': [1, 2]}}, 'reason': 'no matching "
         "value found in array', 'consideredValue': 3}"},
        {"{'$expr': {'$lt': ['$lo', '$hi']}}", "{'lo': 3, 'hi': 2}",
         "{'operatorName': '$expr', 'specifiedAs': {'$expr': {'$lt': ['$lo', '$hi']}}, "
         "'reason': 'expression did not match', 'expressionResult': false}"},
        {"{'$jsonSchema': {'required': ['x', 'y']}}", "{'y': 1}",
         "{'operatorName': '$jsonSchema', 'schemaRulesNotSatisfied': [{'operatorName': "
         "'required', 'specifiedAs': {'required': ['x', 'y']}, 'missingProperties': ['x']}]}"},
        {"{'$jsonSchema': {'properties': {'n': {'bsonType': 'string', 'maxLength': 2}}}}",
         "{'n': 'abc'}",
         "{'operatorName': '$jsonSchema', 'schemaRulesNotSatisfied': [{'operatorName': "
         "'properties', 'propertiesNotSatisfied': [{'propertyName': 'n', 'details': "
         "[{'operatorName': 'maxLength', 'specifiedAs': {'maxLength': 2}, 'reason': "
         "'specified string length was not satisfied', 'consideredValue': 'abc'}]}]}]}"},
        {"{'$jsonSchema': {'properties': {'a': {}}, 'additionalProperties': false}}",
         "{'a': 1, 'z': 2}",
         "{'operatorName': '$jsonSchema', 'schemaRulesNotSatisfied': [{'operatorName': "
         "'additionalProperties', 'specifiedAs': {'additionalProperties': false}, "
         "'additionalProperties': ['z']}]}"},
        {"{'$jsonSchema': {'properties': {'q': {'description': 'qty', 'minimum': 1}}}}",
         "{'q': 0}",
         "{'operatorName': '$jsonSchema', 'schemaRulesNotSatisfied': [{'operatorName': "
         "'properties', 'propertiesNotSatisfied': [{'propertyName': 'q', 'description': 'qty', "
         "'details': [{'operatorName': 'minimum', 'specifiedAs': {'minimum': 1}, 'reason': "
         "'comparison failed', 'consideredValue': 0}]}]}]}"},
        {"{'$jsonSchema': {'properties': {'e': {'enum': [1, 2]}}}}", "{'e': 3}",
         "{'operatorName': '$jsonSchema', 'schemaRulesNotSatisfied': [{'operatorName': "
         "'properties', 'propertiesNotSatisfied': [{'propertyName': 'e', 'details': "
         "[{'operatorName': 'enum', 'specifiedAs': {'enum': [1, 2]}, 'reason': 'value was not "
         "found in enum', 'consideredValue': 3}]}]}]}"},
        {"{'$jsonSchema': {'properties': {'addr': {'required': ['zip'], 'properties': "
         "{'zip': {'bsonType': 'string'}}}}}}",
         "{'addr': {'zip': 5}}",
         "{'operatorName': '$jsonSchema', 'schemaRulesNotSatisfied': [{'operatorName': "
         "'properties', 'propertiesNotSatisfied': [{'propertyName': 'addr', 'details': "
         "[{'operatorName': 'properties', 'propertiesNotSatisfied': [{'propertyName': 'zip', "
         "'details': [{'operatorName': 'bsonType', 'specifiedAs': {'bsonType': 'string'}, "
         "'reason': 'type did not match', 'consideredValue': 5, 'consideredType': 'int'}]}]}]}]}"
         "]}"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        bson_t *v = shl_test_bson(cases[i].validator), *doc = shl_test_bson(cases[i].doc);
        bson_t out = BSON_INITIALIZER;
        db_validation_error_details(v, doc, &out);
        ASSERT_BSON_EQ(&out, cases[i].want);
        bson_destroy(&out);
        bson_destroy(v);
        bson_destroy(doc);
    }
}
