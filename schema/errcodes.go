package schema

import "sort"

// ErrorClass groups Meta error codes by what a sender should do about them
// (docs/meta-webhooks.md section 10).
type ErrorClass string

// The error classes. Their names are part of the query API and of the
// pacing signal.
const (
	ClassThroughput     ErrorClass = "throughput"      // 130429, 4, 80007: the number, app or WABA sends too fast
	ClassPairRate       ErrorClass = "pair_rate"       // 131056: too many messages to one recipient
	ClassMaintenance    ErrorClass = "maintenance"     // 131057, 2494100: the account is in maintenance mode
	ClassQuality        ErrorClass = "quality"         // 131048, 131064: spam or quality limits on the number
	ClassEngagement     ErrorClass = "engagement"      // 131047, 131049, 130472: the recipient may not be messaged now
	ClassUndeliverable  ErrorClass = "undeliverable"   // 131026, 131050, 130403: the recipient cannot or will not receive it
	ClassTemplate       ErrorClass = "template"        // 132xxx, 134xxx: the template is missing, paused or malformed
	ClassMedia          ErrorClass = "media"           // 131052, 131053
	ClassFlow           ErrorClass = "flow"            // 132068, 132069
	ClassPolicy         ErrorClass = "policy"          // 131031, 368: the business or number is restricted
	ClassNumberUnusable ErrorClass = "number_unusable" // 33, 131045, 133010: the number cannot send at all (deleted, not registered)
	ClassCountry        ErrorClass = "country"         // 130497: the business may not message users in the recipient's country
	ClassPayment        ErrorClass = "payment"         // 131042, 134011
	ClassRequest        ErrorClass = "request"         // 100, 131008, 131009, 135000, ...: the request is wrong
	ClassAuth           ErrorClass = "auth"            // 0, 10, 190, 200-299, 131005: token or permission
	ClassRegistration   ErrorClass = "registration"    // 133xxx but 133010: registration and two-step PIN
	ClassService        ErrorClass = "service"         // 1, 2, 131000, 131016: Meta's side failed
	ClassUnknown        ErrorClass = "unknown"         // a code not in the catalogue
)

// Verdict is what a sender should do after an error of a class.
type Verdict string

// The verdicts. Their names are part of the query API and of the pacing
// signal.
const (
	VerdictSlowDown      Verdict = "slow_down"      // queue and slow down the number
	VerdictWaitRecipient Verdict = "wait_recipient" // wait before messaging that recipient again; others are fine
	VerdictPause         Verdict = "pause"          // pause the number briefly (maintenance)
	VerdictStop          Verdict = "stop"           // stop sending from the number; do not retry
	VerdictNotRateLimit  Verdict = "not_rate_limit" // a problem of this message, not of the pace
	// VerdictSkipCountry: do not message recipients in that country from
	// this business (a restriction of the business in one country, 130497);
	// the number and the recipients elsewhere are fine.
	VerdictSkipCountry Verdict = "skip_country"
)

// ErrorCode describes one Meta error code.
type ErrorCode struct {
	Code      int32      `json:"code"`
	Title     string     `json:"title"`
	Class     ErrorClass `json:"class"`
	Verdict   Verdict    `json:"verdict"`
	Retryable bool       `json:"retryable"` // retrying the same request later can succeed
}

// classVerdict is the verdict of each class, and whether its errors are
// retryable unless a code says otherwise.
var classVerdict = map[ErrorClass]struct {
	v     Verdict
	retry bool
}{
	ClassThroughput:     {VerdictSlowDown, true},
	ClassPairRate:       {VerdictWaitRecipient, true},
	ClassMaintenance:    {VerdictPause, true},
	ClassQuality:        {VerdictStop, false},
	ClassEngagement:     {VerdictNotRateLimit, false},
	ClassUndeliverable:  {VerdictNotRateLimit, false},
	ClassTemplate:       {VerdictNotRateLimit, false},
	ClassMedia:          {VerdictNotRateLimit, false},
	ClassFlow:           {VerdictNotRateLimit, false},
	ClassPolicy:         {VerdictStop, false},
	ClassNumberUnusable: {VerdictStop, false},
	ClassCountry:        {VerdictSkipCountry, false},
	ClassPayment:        {VerdictStop, false},
	ClassRequest:        {VerdictNotRateLimit, false},
	ClassAuth:           {VerdictStop, false},
	ClassRegistration:   {VerdictNotRateLimit, false},
	ClassService:        {VerdictNotRateLimit, true},
	ClassUnknown:        {VerdictNotRateLimit, false},
}

// catalogue is docs/meta-webhooks.md section 10: code, title, class, and the codes
// whose retryability differs from their class's.
var catalogue = []struct {
	code  int32
	title string
	class ErrorClass
	retry *bool
}{
	{4, "API too many calls (app rate limit)", ClassThroughput, nil},
	{80007, "Rate limit issues (WABA rate limit)", ClassThroughput, nil},
	{130429, "Rate limit hit (message throughput)", ClassThroughput, nil},
	{131056, "Pair rate limit hit", ClassPairRate, nil},
	{131057, "Business account in maintenance mode", ClassMaintenance, nil},
	{2494100, "Phone migration: account in maintenance mode", ClassMaintenance, nil},
	{131048, "Spam rate limit hit", ClassQuality, nil},
	{131064, "Messaging limit reached (template classification violations)", ClassQuality, nil},
	{131047, "Re-engagement message (more than 24 h since the user replied)", ClassEngagement, nil},
	{131049, "Not delivered to maintain healthy ecosystem engagement", ClassEngagement, nil},
	{130472, "User's number is part of an experiment", ClassEngagement, nil},
	{131026, "Message undeliverable", ClassUndeliverable, nil},
	{131050, "User stopped marketing messages", ClassUndeliverable, nil},
	{130403, "Business has blocked this user", ClassUndeliverable, nil},
	{131021, "Recipient cannot be sender", ClassRequest, nil},
	{131030, "Recipient not in allowed list", ClassRequest, nil},
	{131051, "Unsupported message type", ClassRequest, nil},
	{131052, "Media download error", ClassMedia, nil},
	{131053, "Media upload error", ClassMedia, nil},
	{130497, "Business account restricted from messaging users in this country", ClassCountry, nil},
	{131031, "Account locked", ClassPolicy, nil},
	{368, "Temporarily blocked for policy violations", ClassPolicy, nil},
	{131037, "Number has no approved display name", ClassPolicy, nil},
	{131042, "Business eligibility payment issue", ClassPayment, nil},
	{134011, "WhatsApp Payments terms of service pending", ClassPayment, nil},
	{0, "Auth exception (token expired or invalid)", ClassAuth, nil},
	{3, "API method (capability or permission)", ClassAuth, nil},
	{10, "Permission denied", ClassAuth, nil},
	{190, "Access token expired", ClassAuth, nil},
	{131005, "Access denied", ClassAuth, nil},
	{33, "Business phone number deleted", ClassNumberUnusable, nil},
	{100, "Invalid parameter", ClassRequest, nil},
	{131008, "Required parameter missing", ClassRequest, nil},
	{131009, "Parameter value invalid", ClassRequest, nil},
	{131062, "BSUID recipients not supported for this message", ClassRequest, nil},
	{131063, "Marketing templates disabled for Cloud API", ClassRequest, nil},
	{131055, "Method not allowed (marketing templates only)", ClassRequest, nil},
	{134100, "Only marketing messages supported", ClassRequest, nil},
	{135000, "Generic user error", ClassRequest, nil},
	{137000, "Recipient identity key hash mismatch", ClassRequest, nil},
	{506, "Duplicate post", ClassRequest, nil},
	{132000, "Template parameter count mismatch", ClassTemplate, nil},
	{132001, "Template does not exist", ClassTemplate, nil},
	{132005, "Template hydrated text too long", ClassTemplate, nil},
	{132007, "Template format character policy violated", ClassTemplate, nil},
	{132008, "Template parameter value invalid", ClassTemplate, nil},
	{132012, "Template parameter format mismatch", ClassTemplate, nil},
	{132015, "Template paused", ClassTemplate, nil},
	{132016, "Template disabled", ClassTemplate, nil},
	{132018, "Template validation error", ClassTemplate, nil},
	{134101, "Template still syncing", ClassTemplate, ptr(true)},
	{134102, "Template unavailable", ClassTemplate, nil},
	{132068, "Flow blocked", ClassFlow, nil},
	{132069, "Flow throttled", ClassFlow, ptr(true)},
	{131045, "Phone number registration error (incorrect certificate)", ClassNumberUnusable, nil},
	{133000, "Incomplete deregistration", ClassRegistration, nil},
	{133004, "Server temporarily unavailable", ClassRegistration, ptr(true)},
	{133005, "Two-step verification PIN mismatch", ClassRegistration, nil},
	{133006, "Phone number re-verification needed", ClassRegistration, nil},
	{133008, "Too many two-step verification PIN guesses", ClassRegistration, nil},
	{133009, "Two-step verification PIN guessed too fast", ClassRegistration, nil},
	{133010, "Phone number not registered", ClassNumberUnusable, nil},
	{133015, "Please wait a few minutes before registering", ClassRegistration, ptr(true)},
	{133016, "Account register/deregister rate limit exceeded", ClassRegistration, ptr(true)},
	{1, "API unknown", ClassService, nil},
	{2, "API service (temporary downtime or overload)", ClassService, nil},
	{131000, "Something went wrong", ClassService, nil},
	{131016, "Service unavailable", ClassService, nil},
	{2593109, "History sync turned off by the business", ClassRequest, nil},
}

func ptr[T any](v T) *T { return &v }

var codes = func() map[int32]ErrorCode {
	m := make(map[int32]ErrorCode, len(catalogue)+100)
	for _, c := range catalogue {
		cv := classVerdict[c.class]
		r := cv.retry
		if c.retry != nil {
			r = *c.retry
		}
		m[c.code] = ErrorCode{Code: c.code, Title: c.title, Class: c.class, Verdict: cv.v, Retryable: r}
	}
	// 200-299: API permission errors.
	for code := int32(200); code <= 299; code++ {
		if _, ok := m[code]; !ok {
			m[code] = ErrorCode{Code: code, Title: "API permission", Class: ClassAuth, Verdict: VerdictStop}
		}
	}
	return m
}()

// LookupError describes code. A code outside the catalogue is of class
// unknown, with an empty title, and ok is false.
func LookupError(code int32) (e ErrorCode, ok bool) {
	e, ok = codes[code]
	if !ok {
		e = ErrorCode{Code: code, Class: ClassUnknown, Verdict: VerdictNotRateLimit}
	}
	return e, ok
}

// ErrorCodes is the catalogue, ordered by code.
func ErrorCodes() []ErrorCode {
	out := make([]ErrorCode, 0, len(codes))
	for _, c := range codes {
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Code < out[j].Code })
	return out
}

// ErrorClasses lists every class, unknown last.
func ErrorClasses() []ErrorClass {
	return []ErrorClass{ClassThroughput, ClassPairRate, ClassMaintenance, ClassQuality, ClassEngagement,
		ClassUndeliverable, ClassTemplate, ClassMedia, ClassFlow, ClassPolicy, ClassNumberUnusable, ClassCountry, ClassPayment, ClassRequest,
		ClassAuth, ClassRegistration, ClassService, ClassUnknown}
}

// ClassVerdict is the verdict for errors of class c.
func ClassVerdict(c ErrorClass) Verdict {
	if cv, ok := classVerdict[c]; ok {
		return cv.v
	}
	return VerdictNotRateLimit
}
