package schema

import "time"

// Meta's throughput tiers, in messages per second of one business number,
// inbound and outbound together (docs/meta-webhooks.md 9.1): 80 by default,
// 1,000 after a THROUGHPUT_UPGRADE, 20 for a number also on the WhatsApp
// Business app (coexistence).
const (
	TierDefaultMPS     = 80
	TierUpgradedMPS    = 1000
	TierCoexistenceMPS = 20
)

// Tier sources: where a number's tier comes from, in the pacing signal's
// tier_source and in /api/v1/numbers.
const (
	TierSourceDefault           = "default"
	TierSourceThroughputUpgrade = "throughput_upgrade"
	TierSourceCoexistence       = "coexistence"
	TierSourceOverride          = "override" // the operator's --number-tier
)

// MaintenanceWindow is how long sends may be refused with 131057 after a
// THROUGHPUT_UPGRADE or a 131057 (Meta: up to a minute).
const MaintenanceWindow = time.Minute

// Origins of error rows (ErrorRow.Origin): where in a webhook, or in a send
// result, the error was.
const (
	OriginStatus     = "status"      // statuses[].errors[]
	OriginValue      = "value"       // value.errors[], any field
	OriginInbound    = "inbound"     // messages[].errors[] of field messages
	OriginHistory    = "history"     // history[].errors[], and messages[].errors[] of field history
	OriginCall       = "call"        // errors of call statuses and calls[] (field calls)
	OriginEcho       = "echo"        // message_echoes[].errors[] (field smb_message_echoes)
	OriginSendResult = "send_result" // the error of a failed send result
)
