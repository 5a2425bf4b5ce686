package api

import (
	"encoding/json"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/wahook/wahook/schema"
)

// errorCodes is the answer of /api/v1/error-codes.
type errorCodes struct {
	Codes []schema.ErrorCode `json:"codes"`
}

// responseTypes are the Go types of the answers, by schema name: the
// document's schemas are made from them, so they cannot drift.
var responseTypes = map[string]reflect.Type{
	"Failures":    reflect.TypeOf(Failures{}),
	"Funnel":      reflect.TypeOf(Funnel{}),
	"Throughput":  reflect.TypeOf(Throughput{}),
	"Numbers":     reflect.TypeOf(Numbers{}),
	"DeadLetters": reflect.TypeOf(DeadLetters{}),
	"ErrorCodes":  reflect.TypeOf(errorCodes{}),
	"Error":       reflect.TypeOf(errorBody{}),
	"SendResults": reflect.TypeOf(schema.SendResults{}),
	"Accepted":    reflect.TypeOf(SendResultsAnswer{}),
	"Signals":     reflect.TypeOf(Signals{}),
	"Accounts":    reflect.TypeOf(Accounts{}),
}

var (
	openAPIOnce sync.Once
	openAPIJSON []byte
)

// openAPIDocument is the OpenAPI 3.0 document of the routes.
func openAPIDocument() []byte {
	openAPIOnce.Do(func() {
		b, err := json.MarshalIndent(buildOpenAPI(), "", "  ")
		if err != nil {
			panic(err)
		}
		openAPIJSON = append(b, '\n')
	})
	return openAPIJSON
}

type obj = map[string]any

func buildOpenAPI() obj {
	paths := obj{}
	errRef := obj{"$ref": "#/components/schemas/Error"}
	errResp := func(desc string) obj {
		return obj{"description": desc, "content": obj{"application/json": obj{"schema": errRef}}}
	}
	for _, r := range routes {
		var params []obj
		for _, p := range r.Params {
			params = append(params, paramDoc(p))
		}
		op := obj{
			"operationId": strings.ReplaceAll(r.Name, "-", "_"),
			"summary":     r.Summary,
			"parameters":  params,
			"security":    []obj{{"bearer": []string{}}},
			"responses": obj{
				"200": obj{"description": "the answer", "content": obj{"application/json": obj{"schema": obj{"$ref": "#/components/schemas/" + r.Schema}}}},
				"400": errResp("a parameter is unknown or wrong (code bad_parameter; parameter names it)"),
				"401": errResp("no bearer token, or not a configured one (code unauthorized)"),
				"404": errResp("a scoped token asked for a number or WABA that is not its tenant's, or that exists nowhere (code not_found; parameter names it)"),
				"429": errResp("a limit's window is used up (code rate_limited); Retry-After gives the seconds to wait"),
				"500": errResp("a bug (code internal); the log has the details"),
				"503": errResp("ClickHouse did not answer (code unavailable); retry"),
			},
		}
		if params == nil {
			op["parameters"] = []obj{}
		}
		paths[r.Path] = obj{"get": op}
	}
	paths["/api/v1/send-results"] = obj{"post": obj{
		"operationId": "send_results",
		"summary": "Report the outcomes of sends (accepted with the message id, or failed with Meta's error code), " +
			"as the sending service got them from the send API. Checked whole: one wrong result refuses the request and nothing is stored. " +
			"Stored in JetStream before the 202; counted in the failure distribution (origin send_result) and in the pacing state. " +
			"The same JSON can be published to the JetStream subject " + schema.SubjectSendResults + ".",
		"security":    []obj{{"bearer": []string{}}},
		"requestBody": obj{"required": true, "content": obj{"application/json": obj{"schema": obj{"$ref": "#/components/schemas/SendResults"}}}},
		"responses": obj{
			"202": obj{"description": "stored", "content": obj{"application/json": obj{"schema": obj{"$ref": "#/components/schemas/Accepted"}}}},
			"400": errResp("the document or one result is wrong (code bad_parameter; parameter is its path, e.g. results[3].error_code)"),
			"401": errResp("no bearer token, or not a configured one (code unauthorized)"),
			"403": errResp("the token would report for more phone number ids than it may (code too_many_numbers; --api-max-numbers-per-token); nothing was stored"),
			"404": errResp("a scoped token reported for a number that is not its tenant's, or that wahook has seen no webhook of yet (code not_found; parameter is its path); nothing was stored"),
			"408": errResp("the document was cut short or not received in time (code bad_parameter)"),
			"413": errResp("the document is over 1 MiB (code bad_parameter)"),
			"429": errResp("a send-results limit's window is used up (code rate_limited); Retry-After gives the seconds to wait"),
			"500": errResp("a bug (code internal); the log has the details"),
			"503": errResp("JetStream did not take the document, or intake is off (code unavailable); retry"),
		},
	}}
	live := func(id, summary string, ok obj) obj {
		return obj{"get": obj{
			"operationId": id, "summary": summary,
			"security": []obj{{"bearer": []string{}}},
			"responses": obj{
				"200": ok,
				"401": errResp("no bearer token, or not a configured one (code unauthorized)"),
				"429": errResp("a limit's window is used up, or the token holds the most live streams it may (code rate_limited)"),
				"500": errResp("a bug (code internal); the log has the details"),
				"503": errResp("this API runs without NATS, NATS did not answer, or too many live streams are open (code unavailable)"),
			},
		}}
	}
	paths["/api/v1/pacing"] = live("pacing", "Every number's current pacing signal (the wahook_pacing bucket), the most urgent advice first; a scoped token sees its WABAs' numbers only",
		obj{"description": "the signals", "content": obj{"application/json": obj{"schema": obj{"$ref": "#/components/schemas/Signals"}}}})
	paths["/api/v1/pacing/stream"] = live("pacing_stream", "The pacing signals as they change, as server-sent events (one event per signal, data: its JSON), after the current ones; event delete (data: {\"phone_number_id\": ...}) when a number's key is deleted or purged",
		obj{"description": "an event stream", "content": obj{"text/event-stream": obj{}}})
	accounts := live("accounts", "Every WABA's ban and restrictions as Meta's account_update events last set them (the wahook_accounts bucket), with whether its numbers may send business-initiated messages and replies now; those that cannot first. A scoped token sees its WABAs only",
		obj{"description": "the WABAs' states", "content": obj{"application/json": obj{"schema": obj{"$ref": "#/components/schemas/Accounts"}}}})
	accounts["get"].(obj)["parameters"] = []obj{paramDoc(accountParams[0])}
	accounts["get"].(obj)["responses"].(obj)["400"] = errResp("a parameter is unknown or malformed (code bad_parameter)")
	accounts["get"].(obj)["responses"].(obj)["404"] = errResp("a scoped token asked for a WABA that is not its tenant's (code not_found)")
	paths["/api/v1/accounts"] = accounts
	paths["/api/v1/openapi.json"] = obj{"get": obj{
		"operationId": "openapi", "summary": "This document", "security": []obj{},
		"responses": obj{
			"200": obj{"description": "OpenAPI 3.0 document", "content": obj{"application/json": obj{}}},
			"429": errResp("a limit's window is used up (code rate_limited); Retry-After gives the seconds to wait"),
		},
	}}
	schemas := obj{}
	for name, t := range responseTypes {
		schemas[name] = typeSchema(t)
	}
	return obj{
		"openapi": "3.0.3",
		"info": obj{
			"title":   "wahook query API",
			"version": "1",
			"description": "Failure distribution, delivery funnel, throughput and number state of WhatsApp Cloud API traffic, " +
				"computed in ClickHouse and exact under duplicate events. Every route needs `Authorization: Bearer <token>`. " +
				"Limits are fixed windows per client IP and per token; a refused request gets 429 with Retry-After. " +
				"Times are UTC.",
		},
		"paths": paths,
		"components": obj{
			"schemas":         schemas,
			"securitySchemes": obj{"bearer": obj{"type": "http", "scheme": "bearer"}},
		},
	}
}

func paramDoc(p param) obj {
	s := obj{}
	switch p.Kind {
	case kindTime:
		s = obj{"type": "string", "example": "2026-03-14T00:00:00Z"}
	case kindStrings:
		s = obj{"type": "array", "items": obj{"type": "string"}}
	case kindInts:
		s = obj{"type": "array", "items": obj{"type": "integer"}}
	case kindEnum:
		s = obj{"type": "string", "enum": p.Enum}
	case kindEnums:
		s = obj{"type": "array", "items": obj{"type": "string", "enum": p.Enum}}
	case kindInt:
		s = obj{"type": "integer", "minimum": p.Min, "maximum": p.Max}
	case kindString:
		s = obj{"type": "string"}
	}
	if p.Default != "" {
		// In the schema's own type: a number for an integer, a list for
		// an array (a string there is no valid default).
		switch s["type"] {
		case "integer":
			n, err := strconv.Atoi(p.Default)
			if err != nil {
				panic("api: default of " + p.Name + " is no integer: " + p.Default)
			}
			s["default"] = n
		case "array":
			s["default"] = strings.Split(p.Default, ",")
		default:
			s["default"] = p.Default
		}
	}
	d := obj{"name": p.Name, "in": "query", "description": p.Doc, "required": p.Required, "schema": s}
	if s["type"] == "array" {
		d["style"], d["explode"] = "form", false
	}
	return d
}

var (
	timeType      = reflect.TypeOf(time.Time{})
	timestampType = reflect.TypeOf(schema.Timestamp{})
)

// typeSchema is the JSON schema of the JSON encoding/json makes of t.
func typeSchema(t reflect.Type) obj {
	nullable := false
	for t.Kind() == reflect.Pointer {
		t, nullable = t.Elem(), true
	}
	var s obj
	switch {
	case t == timestampType:
		s = obj{"description": "Unix seconds, or RFC 3339", "oneOf": []obj{{"type": "integer"}, {"type": "string", "format": "date-time"}}}
	case t == timeType:
		s = obj{"type": "string", "format": "date-time"}
	case t.Kind() == reflect.String:
		s = obj{"type": "string"}
	case t.Kind() == reflect.Bool:
		s = obj{"type": "boolean"}
	case t.Kind() >= reflect.Int && t.Kind() <= reflect.Uint64:
		s = obj{"type": "integer"}
	case t.Kind() == reflect.Float32 || t.Kind() == reflect.Float64:
		s = obj{"type": "number"}
	case t.Kind() == reflect.Slice:
		s = obj{"type": "array", "items": typeSchema(t.Elem())}
	case t.Kind() == reflect.Map:
		s = obj{"type": "object", "additionalProperties": typeSchema(t.Elem())}
	case t.Kind() == reflect.Struct:
		props := obj{}
		var required []string
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			if !f.IsExported() {
				continue
			}
			name, opts, _ := strings.Cut(f.Tag.Get("json"), ",")
			if name == "-" {
				continue
			}
			if name == "" && f.Anonymous && f.Type.Kind() == reflect.Struct {
				// Embedded: its fields are the struct's own, as
				// encoding/json writes them.
				inner := typeSchema(f.Type)
				for k, v := range inner["properties"].(obj) {
					props[k] = v
				}
				if r, ok := inner["required"].([]string); ok {
					required = append(required, r...)
				}
				continue
			}
			if name == "" {
				name = f.Name
			}
			props[name] = typeSchema(f.Type)
			if !strings.Contains(opts, "omitempty") && f.Type.Kind() != reflect.Pointer {
				required = append(required, name)
			}
		}
		s = obj{"type": "object", "properties": props}
		if len(required) > 0 {
			s["required"] = required
		}
	default:
		s = obj{}
	}
	if nullable {
		s["nullable"] = true
	}
	return s
}
