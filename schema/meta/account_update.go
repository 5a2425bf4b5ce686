package meta

// AccountUpdate is the value of account_update (docs/meta-webhooks.md 9.3): an event
// and the object that goes with it. The objects of events not listed here
// are kept in Extra.
type AccountUpdate struct {
	Event string `json:"event"`
	// PhoneNumber appears in older payloads (unverified).
	PhoneNumber                      string                            `json:"phone_number,omitempty"`
	WABAInfo                         *WABAInfo                         `json:"waba_info,omitempty"`
	BanInfo                          *BanInfo                          `json:"ban_info,omitempty"`
	RestrictionInfo                  []Restriction                     `json:"restriction_info,omitempty"`
	ViolationInfo                    *ViolationInfo                    `json:"violation_info,omitempty"`
	AuthInternationalRateEligibility *AuthInternationalRateEligibility `json:"auth_international_rate_eligibility,omitempty"`
	Country                          string                            `json:"country,omitempty"`
	PartnerClientCertificationInfo   *PartnerClientCertificationInfo   `json:"partner_client_certification_info,omitempty"`
	VolumeTierInfo                   *VolumeTierInfo                   `json:"volume_tier_info,omitempty"`
	DisconnectionInfo                *DisconnectionInfo                `json:"disconnection_info,omitempty"`
	Extra                            Extras                            `json:"-"`
}

func (a *AccountUpdate) decode(d *decoder) error {
	return d.object(func(k []byte) error {
		switch string(k) {
		case "event":
			return d.str(&a.Event)
		case "phone_number":
			return d.str(&a.PhoneNumber)
		case "waba_info":
			return decodePtr(d, &a.WABAInfo)
		case "ban_info":
			return decodePtr(d, &a.BanInfo)
		case "restriction_info":
			return decodeArray(d, &a.RestrictionInfo)
		case "violation_info":
			return decodePtr(d, &a.ViolationInfo)
		case "auth_international_rate_eligibility":
			return decodePtr(d, &a.AuthInternationalRateEligibility)
		case "country":
			return d.str(&a.Country)
		case "partner_client_certification_info":
			return decodePtr(d, &a.PartnerClientCertificationInfo)
		case "volume_tier_info":
			return decodePtr(d, &a.VolumeTierInfo)
		case "disconnection_info":
			return decodePtr(d, &a.DisconnectionInfo)
		default:
			return d.extra(&a.Extra, k)
		}
	})
}

// WABAInfo describes the WABA in partner and ad-account events.
type WABAInfo struct {
	WABAID                     string   `json:"waba_id,omitempty"`
	OwnerBusinessID            string   `json:"owner_business_id,omitempty"`
	AdAccountLinked            string   `json:"ad_account_linked,omitempty"`
	PartnerAppID               string   `json:"partner_app_id,omitempty"`
	SolutionID                 string   `json:"solution_id,omitempty"`
	SolutionPartnerBusinessIDs []string `json:"solution_partner_business_ids,omitempty"`
	Extra                      Extras   `json:"-"`
}

func (w *WABAInfo) decode(d *decoder) error {
	return d.object(func(k []byte) error {
		switch string(k) {
		case "waba_id":
			return d.str(&w.WABAID)
		case "owner_business_id":
			return d.str(&w.OwnerBusinessID)
		case "ad_account_linked":
			return d.str(&w.AdAccountLinked)
		case "partner_app_id":
			return d.str(&w.PartnerAppID)
		case "solution_id":
			return d.str(&w.SolutionID)
		case "solution_partner_business_ids":
			return decodeStrings(d, &w.SolutionPartnerBusinessIDs)
		default:
			return d.extra(&w.Extra, k)
		}
	})
}

// BanInfo is the ban state of a WABA. WABABanDate is free text such as
// "April 17, 2025".
type BanInfo struct {
	WABABanState string `json:"waba_ban_state,omitempty"`
	WABABanDate  string `json:"waba_ban_date,omitempty"`
	Extra        Extras `json:"-"`
}

func (b *BanInfo) decode(d *decoder) error {
	return d.object(func(k []byte) error {
		switch string(k) {
		case "waba_ban_state":
			return d.str(&b.WABABanState)
		case "waba_ban_date":
			return d.str(&b.WABABanDate)
		default:
			return d.extra(&b.Extra, k)
		}
	})
}

// Restriction is one restriction_info[] item. Expiration is disputed: an int
// of unix seconds (pywa) or an ISO-8601 string (Wati), so it is kept as sent;
// FlexString.Int64 gives the unix form when it is one.
type Restriction struct {
	RestrictionType string     `json:"restriction_type,omitempty"`
	Expiration      FlexString `json:"expiration,omitempty"`
	Remediation     string     `json:"remediation,omitempty"`
	Extra           Extras     `json:"-"`
}

func (r *Restriction) decode(d *decoder) error {
	return d.object(func(k []byte) error {
		switch string(k) {
		case "restriction_type":
			return d.str(&r.RestrictionType)
		case "expiration":
			return d.flexString(&r.Expiration)
		case "remediation":
			return d.str(&r.Remediation)
		default:
			return d.extra(&r.Extra, k)
		}
	})
}

// ViolationInfo names the policy a WABA violated.
type ViolationInfo struct {
	ViolationType string `json:"violation_type,omitempty"`
	Extra         Extras `json:"-"`
}

func (v *ViolationInfo) decode(d *decoder) error {
	return d.object(func(k []byte) error {
		if string(k) == "violation_type" {
			return d.str(&v.ViolationType)
		}
		return d.extra(&v.Extra, k)
	})
}

// AuthInternationalRateEligibility is the object of
// AUTH_INTL_PRICE_ELIGIBILITY_UPDATE.
type AuthInternationalRateEligibility struct {
	StartTime          FlexInt64          `json:"start_time,omitempty"`
	ExceptionCountries []ExceptionCountry `json:"exception_countries,omitempty"`
	Extra              Extras             `json:"-"`
}

func (a *AuthInternationalRateEligibility) decode(d *decoder) error {
	return d.object(func(k []byte) error {
		switch string(k) {
		case "start_time":
			return d.int(&a.StartTime)
		case "exception_countries":
			return decodeArray(d, &a.ExceptionCountries)
		default:
			return d.extra(&a.Extra, k)
		}
	})
}

// ExceptionCountry is a country with its own start time.
type ExceptionCountry struct {
	CountryCode string    `json:"country_code,omitempty"`
	StartTime   FlexInt64 `json:"start_time,omitempty"`
	Extra       Extras    `json:"-"`
}

func (e *ExceptionCountry) decode(d *decoder) error {
	return d.object(func(k []byte) error {
		switch string(k) {
		case "country_code":
			return d.str(&e.CountryCode)
		case "start_time":
			return d.int(&e.StartTime)
		default:
			return d.extra(&e.Extra, k)
		}
	})
}

// PartnerClientCertificationInfo is the object of
// PARTNER_CLIENT_CERTIFICATION_STATUS_UPDATE.
type PartnerClientCertificationInfo struct {
	ClientBusinessID string   `json:"client_business_id,omitempty"`
	Status           string   `json:"status,omitempty"`
	RejectionReasons []string `json:"rejection_reasons,omitempty"`
	Extra            Extras   `json:"-"`
}

func (p *PartnerClientCertificationInfo) decode(d *decoder) error {
	return d.object(func(k []byte) error {
		switch string(k) {
		case "client_business_id":
			return d.str(&p.ClientBusinessID)
		case "status":
			return d.str(&p.Status)
		case "rejection_reasons":
			return decodeStrings(d, &p.RejectionReasons)
		default:
			return d.extra(&p.Extra, k)
		}
	})
}

// VolumeTierInfo is the object of VOLUME_BASED_PRICING_TIER_UPDATE. Tier is
// "min:max"; EffectiveMonth is "YYYY-MM".
type VolumeTierInfo struct {
	TierUpdateTime  FlexInt64 `json:"tier_update_time,omitempty"`
	PricingCategory string    `json:"pricing_category,omitempty"`
	Tier            string    `json:"tier,omitempty"`
	EffectiveMonth  string    `json:"effective_month,omitempty"`
	Region          string    `json:"region,omitempty"`
	Extra           Extras    `json:"-"`
}

func (v *VolumeTierInfo) decode(d *decoder) error {
	return d.object(func(k []byte) error {
		switch string(k) {
		case "tier_update_time":
			return d.int(&v.TierUpdateTime)
		case "pricing_category":
			return d.str(&v.PricingCategory)
		case "tier":
			return d.str(&v.Tier)
		case "effective_month":
			return d.str(&v.EffectiveMonth)
		case "region":
			return d.str(&v.Region)
		default:
			return d.extra(&v.Extra, k)
		}
	})
}

// DisconnectionInfo is the object of ACCOUNT_RECONNECTED (pywa only).
type DisconnectionInfo struct {
	Reason      string `json:"reason,omitempty"`
	InitiatedBy string `json:"initiated_by,omitempty"`
	Extra       Extras `json:"-"`
}

func (i *DisconnectionInfo) decode(d *decoder) error {
	return d.object(func(k []byte) error {
		switch string(k) {
		case "reason":
			return d.str(&i.Reason)
		case "initiated_by":
			return d.str(&i.InitiatedBy)
		default:
			return d.extra(&i.Extra, k)
		}
	})
}
