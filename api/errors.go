package api

import (
	"errors"
	"fmt"
	"net/http"
)

// Error codes of the API. They are stable: clients branch on them.
const (
	CodeBadParameter = "bad_parameter" // a parameter is unknown, malformed or out of range; Parameter names it
	CodeUnauthorized = "unauthorized"  // no bearer token, or not a configured one
	CodeRateLimited  = "rate_limited"  // a limit's window is used up; Retry-After says for how long
	CodeNotFound     = "not_found"     // no such route or object
	CodeUnavailable  = "unavailable"   // ClickHouse did not answer in time; retry
	CodeInternal     = "internal"      // a bug; the log has the details
	// CodeTooManyNumbers refuses send results that would take their token
	// past the phone number ids it may report (Config.MaxNumbersPerToken).
	CodeTooManyNumbers = "too_many_numbers"
)

// Error is the body of every answer that is not a 2xx:
//
//	{"error": {"code": "bad_parameter", "message": "...", "parameter": "from"}}
type Error struct {
	Status    int    `json:"-"`
	Code      string `json:"code"`
	Message   string `json:"message"`
	Parameter string `json:"parameter,omitempty"`
}

func (e *Error) Error() string {
	if e.Parameter != "" {
		return fmt.Sprintf("%s: %s", e.Parameter, e.Message)
	}
	return e.Message
}

// errorBody wraps an Error as the API answers it.
type errorBody struct {
	Error *Error `json:"error"`
}

// BadParameter is the error for a parameter name whose value is wrong.
func BadParameter(name, format string, args ...any) *Error {
	return &Error{Status: http.StatusBadRequest, Code: CodeBadParameter, Parameter: name, Message: fmt.Sprintf(format, args...)}
}

// asError turns any error into the API's error, hiding internals.
func asError(err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	if errors.Is(err, errUnavailable) {
		return &Error{Status: http.StatusServiceUnavailable, Code: CodeUnavailable, Message: "ClickHouse did not answer; retry later"}
	}
	return &Error{Status: http.StatusInternalServerError, Code: CodeInternal, Message: "internal error"}
}

// errUnavailable marks a query that failed because ClickHouse could not be
// reached or timed out.
var errUnavailable = errors.New("clickhouse unavailable")
