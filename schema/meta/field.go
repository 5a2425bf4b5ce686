package meta

// Field names: the values of changes[].field (docs/meta-webhooks.md 3). Any other
// value is an unknown field, kept raw.
const (
	FieldMessages                        = "messages"
	FieldCalls                           = "calls"
	FieldPhoneNumberQualityUpdate        = "phone_number_quality_update"
	FieldBusinessCapabilityUpdate        = "business_capability_update"
	FieldAccountUpdate                   = "account_update"
	FieldAccountAlerts                   = "account_alerts"
	FieldAccountReviewUpdate             = "account_review_update"
	FieldMessageTemplateStatusUpdate     = "message_template_status_update"
	FieldMessageTemplateQualityUpdate    = "message_template_quality_update"
	FieldTemplateCategoryUpdate          = "template_category_update"
	FieldMessageTemplateComponentsUpdate = "message_template_components_update"
	FieldPhoneNumberNameUpdate           = "phone_number_name_update"
	FieldSecurity                        = "security"
	FieldUserPreferences                 = "user_preferences"
	FieldSMBMessageEchoes                = "smb_message_echoes"
	FieldHistory                         = "history"
	FieldSMBAppStateSync                 = "smb_app_state_sync"
	FieldAccountSettingsUpdate           = "account_settings_update"
	FieldAutomaticEvents                 = "automatic_events"
	FieldPartnerSolutions                = "partner_solutions"
	FieldPaymentConfigurationUpdate      = "payment_configuration_update"

	// The Groups API and Flows fields are known by name, but their shapes
	// are unverified (docs/meta-webhooks.md 8.2 and 3), so they are kept raw like an
	// unknown field.
	FieldGroupLifecycleUpdate    = "group_lifecycle_update"
	FieldGroupParticipantsUpdate = "group_participants_update"
	FieldGroupSettingsUpdate     = "group_settings_update"
	FieldGroupStatusUpdate       = "group_status_update"
	FieldFlows                   = "flows"
)

// ObjectWhatsAppBusinessAccount is the value of the top-level "object" key
// for WhatsApp webhooks (docs/meta-webhooks.md 2).
const ObjectWhatsAppBusinessAccount = "whatsapp_business_account"

// Message status values (docs/meta-webhooks.md 5.2). Values seen so far, never a closed
// set: Status.Status keeps whatever Meta sent.
const (
	StatusSent      = "sent"
	StatusDelivered = "delivered"
	StatusRead      = "read"
	StatusPlayed    = "played"
	StatusFailed    = "failed"
	// StatusDeleted and StatusWarning are On-Premises API values, not
	// documented for the Cloud API; they are kept like any other value.
	StatusDeleted = "deleted"
	StatusWarning = "warning"
)

// RecipientTypeGroup marks a status of a message sent to a group
// (docs/meta-webhooks.md 8.1).
const RecipientTypeGroup = "group"

// interned holds the enumerated values that are read with decoder.enum, so
// that the common ones cost no allocation. Anything not listed is still
// accepted and kept.
var interned = func() map[string]string {
	m := map[string]string{}
	for _, s := range []string{
		// fields
		FieldMessages, FieldCalls, FieldPhoneNumberQualityUpdate, FieldBusinessCapabilityUpdate,
		FieldAccountUpdate, FieldAccountAlerts, FieldAccountReviewUpdate,
		FieldMessageTemplateStatusUpdate, FieldMessageTemplateQualityUpdate,
		FieldTemplateCategoryUpdate, FieldMessageTemplateComponentsUpdate,
		FieldPhoneNumberNameUpdate, FieldSecurity, FieldUserPreferences, FieldSMBMessageEchoes,
		FieldHistory, FieldSMBAppStateSync, FieldAccountSettingsUpdate, FieldAutomaticEvents,
		FieldPartnerSolutions, FieldPaymentConfigurationUpdate, FieldGroupLifecycleUpdate,
		FieldGroupParticipantsUpdate, FieldGroupSettingsUpdate, FieldGroupStatusUpdate, FieldFlows,
		ObjectWhatsAppBusinessAccount, "whatsapp",
		// statuses (docs/meta-webhooks.md 5.2), call statuses and recipient types
		StatusSent, StatusDelivered, StatusRead, StatusPlayed, StatusFailed, StatusDeleted, StatusWarning,
		"RINGING", "ACCEPTED", "REJECTED", "call", "message", RecipientTypeGroup, "individual",
		// pricing and conversation (docs/meta-webhooks.md 5.3, 5.4)
		"PMP", "CBP", "NBP", "regular", "free_customer_service", "free_entry_point",
		"free_group_customer_service", "authentication", "authentication_international",
		"authentication-international", "marketing", "marketing_lite", "utility", "service",
		"referral_conversion", "group_marketing", "group_utility", "group_service",
		"general_purpose_ai", "business_initiated", "user_initiated",
		// message types (docs/meta-webhooks.md 7.2)
		"text", "image", "video", "audio", "document", "sticker", "location", "contacts",
		"interactive", "button", "reaction", "order", "system", "unsupported", "unknown",
		"request_welcome", "edit", "revoke", "media_placeholder",
		"button_reply", "list_reply", "nfm_reply", "call_permission_reply",
		// calls (docs/meta-webhooks.md 9.16)
		"connect", "terminate", "USER_INITIATED", "BUSINESS_INITIATED", "COMPLETED", "FAILED",
	} {
		m[s] = s
	}
	return m
}()
