package meta

// This file holds the values of the account and phone-number management
// fields (docs/meta-webhooks.md 9.1-9.5, 9.10, 9.11, 9.18). They carry no metadata; the
// number ones name the number by display_phone_number only.

// PhoneNumberQualityUpdate is the value of phone_number_quality_update
// (docs/meta-webhooks.md 9.1): messaging-limit and throughput changes of a number.
type PhoneNumberQualityUpdate struct {
	// DisplayPhoneNumber is the only number identifier: there is no
	// phone_number_id (docs/meta-webhooks.md 11.2 rule 10).
	DisplayPhoneNumber string `json:"display_phone_number"`
	// Event is THROUGHPUT_UPGRADE, ONBOARDING, or the legacy UPGRADE,
	// DOWNGRADE, FLAGGED, UNFLAGGED; others are kept.
	Event string `json:"event"`
	// CurrentLimit and OldLimit are tiers such as TIER_2K or TIER_UNLIMITED
	// (deprecated by Meta, still sent); empty when absent.
	CurrentLimit string `json:"current_limit,omitempty"`
	OldLimit     string `json:"old_limit,omitempty"`
	// MaxDailyConversationsPerBusiness is the portfolio messaging limit.
	MaxDailyConversationsPerBusiness FlexString `json:"max_daily_conversations_per_business,omitempty"`
	Extra                            Extras     `json:"-"`
}

func (q *PhoneNumberQualityUpdate) decode(d *decoder) error {
	return d.object(func(k []byte) error {
		switch string(k) {
		case "display_phone_number":
			return d.displayNumber(&q.DisplayPhoneNumber)
		case "event":
			return d.str(&q.Event)
		case "current_limit":
			return d.str(&q.CurrentLimit)
		case "old_limit":
			return d.str(&q.OldLimit)
		case "max_daily_conversations_per_business":
			return d.flexString(&q.MaxDailyConversationsPerBusiness)
		default:
			return d.extra(&q.Extra, k)
		}
	})
}

// BusinessCapabilityUpdate is the value of business_capability_update
// (docs/meta-webhooks.md 9.2). A zero int means the key was absent.
type BusinessCapabilityUpdate struct {
	// MaxDailyConversationPerPhone is the legacy limit: 250, 2000, 10000,
	// 100000, or -1 for unlimited.
	MaxDailyConversationPerPhone FlexInt64 `json:"max_daily_conversation_per_phone,omitempty"`
	// MaxDailyConversationsPerBusiness is a tier ("TIER_2K") in Meta's table
	// and an int (2000) in its example (docs/meta-webhooks.md 11.1); kept as sent.
	MaxDailyConversationsPerBusiness FlexString `json:"max_daily_conversations_per_business,omitempty"`
	MaxPhoneNumbersPerBusiness       FlexInt64  `json:"max_phone_numbers_per_business,omitempty"`
	MaxPhoneNumbersPerWABA           FlexInt64  `json:"max_phone_numbers_per_waba,omitempty"`
	Extra                            Extras     `json:"-"`
}

func (b *BusinessCapabilityUpdate) decode(d *decoder) error {
	return d.object(func(k []byte) error {
		switch string(k) {
		case "max_daily_conversation_per_phone":
			return d.int(&b.MaxDailyConversationPerPhone)
		case "max_daily_conversations_per_business":
			return d.flexString(&b.MaxDailyConversationsPerBusiness)
		case "max_phone_numbers_per_business":
			return d.int(&b.MaxPhoneNumbersPerBusiness)
		case "max_phone_numbers_per_waba":
			return d.int(&b.MaxPhoneNumbersPerWABA)
		default:
			return d.extra(&b.Extra, k)
		}
	})
}

// AccountAlert is the value of account_alerts (docs/meta-webhooks.md 9.4).
type AccountAlert struct {
	EntityType string    `json:"entity_type,omitempty"`
	EntityID   string    `json:"entity_id,omitempty"`
	AlertInfo  AlertInfo `json:"alert_info"`
	Extra      Extras    `json:"-"`
}

// AlertInfo describes an account alert.
type AlertInfo struct {
	AlertSeverity    string `json:"alert_severity,omitempty"`
	AlertStatus      string `json:"alert_status,omitempty"`
	AlertType        string `json:"alert_type,omitempty"`
	AlertDescription string `json:"alert_description,omitempty"`
	Extra            Extras `json:"-"`
}

func (a *AccountAlert) decode(d *decoder) error {
	return d.object(func(k []byte) error {
		switch string(k) {
		case "entity_type":
			return d.str(&a.EntityType)
		case "entity_id":
			return d.str(&a.EntityID)
		case "alert_info":
			return decodeIn(d, &a.AlertInfo)
		default:
			return d.extra(&a.Extra, k)
		}
	})
}

func (a *AlertInfo) decode(d *decoder) error {
	return d.object(func(k []byte) error {
		switch string(k) {
		case "alert_severity":
			return d.str(&a.AlertSeverity)
		case "alert_status":
			return d.str(&a.AlertStatus)
		case "alert_type":
			return d.str(&a.AlertType)
		case "alert_description":
			return d.str(&a.AlertDescription)
		default:
			return d.extra(&a.Extra, k)
		}
	})
}

// AccountReviewUpdate is the value of account_review_update (docs/meta-webhooks.md
// 9.5): APPROVED, REJECTED, PENDING or DEFERRED.
type AccountReviewUpdate struct {
	Decision string `json:"decision"`
	Extra    Extras `json:"-"`
}

func (a *AccountReviewUpdate) decode(d *decoder) error {
	return d.object(func(k []byte) error {
		if string(k) == "decision" {
			return d.str(&a.Decision)
		}
		return d.extra(&a.Extra, k)
	})
}

// PhoneNumberNameUpdate is the value of phone_number_name_update
// (docs/meta-webhooks.md 9.10). RejectionReason is "" for JSON null.
type PhoneNumberNameUpdate struct {
	DisplayPhoneNumber    string `json:"display_phone_number"`
	Decision              string `json:"decision,omitempty"`
	RequestedVerifiedName string `json:"requested_verified_name,omitempty"`
	RejectionReason       string `json:"rejection_reason,omitempty"`
	Extra                 Extras `json:"-"`
}

func (n *PhoneNumberNameUpdate) decode(d *decoder) error {
	return d.object(func(k []byte) error {
		switch string(k) {
		case "display_phone_number":
			return d.displayNumber(&n.DisplayPhoneNumber)
		case "decision":
			return d.str(&n.Decision)
		case "requested_verified_name":
			return d.str(&n.RequestedVerifiedName)
		case "rejection_reason":
			return d.str(&n.RejectionReason)
		default:
			return d.extra(&n.Extra, k)
		}
	})
}

// SecurityUpdate is the value of security (docs/meta-webhooks.md 9.11): two-step PIN
// changes. Requester is set for reset requests only.
type SecurityUpdate struct {
	DisplayPhoneNumber string `json:"display_phone_number"`
	Event              string `json:"event"`
	Requester          string `json:"requester,omitempty"`
	Extra              Extras `json:"-"`
}

func (s *SecurityUpdate) decode(d *decoder) error {
	return d.object(func(k []byte) error {
		switch string(k) {
		case "display_phone_number":
			return d.displayNumber(&s.DisplayPhoneNumber)
		case "event":
			return d.str(&s.Event)
		case "requester":
			return d.str(&s.Requester)
		default:
			return d.extra(&s.Extra, k)
		}
	})
}

// PartnerSolutionsUpdate is the value of partner_solutions (docs/meta-webhooks.md
// 9.18); its entry id is a business portfolio id, not a WABA id.
type PartnerSolutionsUpdate struct {
	Event          string `json:"event"`
	SolutionID     string `json:"solution_id,omitempty"`
	SolutionStatus string `json:"solution_status,omitempty"`
	Extra          Extras `json:"-"`
}

func (p *PartnerSolutionsUpdate) decode(d *decoder) error {
	return d.object(func(k []byte) error {
		switch string(k) {
		case "event":
			return d.str(&p.Event)
		case "solution_id":
			return d.str(&p.SolutionID)
		case "solution_status":
			return d.str(&p.SolutionStatus)
		default:
			return d.extra(&p.Extra, k)
		}
	})
}

// PaymentConfigurationUpdate is the value of payment_configuration_update
// (docs/meta-webhooks.md 9.18).
type PaymentConfigurationUpdate struct {
	ConfigurationName string    `json:"configuration_name,omitempty"`
	ProviderName      string    `json:"provider_name,omitempty"`
	ProviderMID       string    `json:"provider_mid,omitempty"`
	Status            string    `json:"status,omitempty"`
	CreatedTimestamp  FlexInt64 `json:"created_timestamp,omitempty"`
	UpdatedTimestamp  FlexInt64 `json:"updated_timestamp,omitempty"`
	Extra             Extras    `json:"-"`
}

func (p *PaymentConfigurationUpdate) decode(d *decoder) error {
	return d.object(func(k []byte) error {
		switch string(k) {
		case "configuration_name":
			return d.str(&p.ConfigurationName)
		case "provider_name":
			return d.str(&p.ProviderName)
		case "provider_mid":
			return d.str(&p.ProviderMID)
		case "status":
			return d.str(&p.Status)
		case "created_timestamp":
			return d.int(&p.CreatedTimestamp)
		case "updated_timestamp":
			return d.int(&p.UpdatedTimestamp)
		default:
			return d.extra(&p.Extra, k)
		}
	})
}
