// Package api is wahook's query API: JSON over HTTP under /api/v1, computed
// in ClickHouse from the tables of schema/migrations. It answers the
// failure distribution (by code, class, number, WABA, template, campaign,
// origin, over time), the delivery funnel with delivery and read times,
// throughput per number against its tier, the state of each number, and
// dead letters; every answer is exact when events were inserted more than
// once (a redelivery, a replay, a retry by Meta).
//
// Access is by bearer token (several, for rotation), behind two layers of
// fixed-window limits per client IP and per token (limits.go). Errors are
// JSON with a stable code (errors.go). The routes are one table (server.go)
// that drives the router, the command line (wahook report, through Run)
// and the OpenAPI document served at /api/v1/openapi.json; the dimensions
// the reports filter and group by (number, WABA, template, campaign, code,
// class, origin) are another (dimensions.go), which drives their query
// parameters, their SQL and the fields of their answers.
//
// The package reads ClickHouse only; it never decodes webhooks (schema/meta
// and processor do) and is not on the webhook path.
package api
