package meta

// This file holds the values of the template fields (docs/meta-webhooks.md 9.6-9.9).
// message_template_id is a JSON int of up to 16 digits; it is kept as its
// literal digits (FlexString), never through a float (docs/meta-webhooks.md 11.2
// rule 4).

// TemplateStatusUpdate is the value of message_template_status_update
// (docs/meta-webhooks.md 9.6).
type TemplateStatusUpdate struct {
	// Event is APPROVED, REJECTED, PENDING, DISABLED, PAUSED, ...
	Event      string     `json:"event"`
	TemplateID FlexString `json:"message_template_id"`
	Name       string     `json:"message_template_name,omitempty"`
	// Language is en_US in most examples, en-US in some; kept as sent.
	Language string `json:"message_template_language,omitempty"`
	Category string `json:"message_template_category,omitempty"`
	// Reason is "" for JSON null (scheduled for deletion).
	Reason        string         `json:"reason,omitempty"`
	DisableInfo   *DisableInfo   `json:"disable_info,omitempty"`
	OtherInfo     *OtherInfo     `json:"other_info,omitempty"`
	RejectionInfo *RejectionInfo `json:"rejection_info,omitempty"`
	Extra         Extras         `json:"-"`
}

func (t *TemplateStatusUpdate) decode(d *decoder) error {
	return d.object(func(k []byte) error {
		switch string(k) {
		case "event":
			return d.str(&t.Event)
		case "message_template_id":
			return d.flexString(&t.TemplateID)
		case "message_template_name":
			return d.str(&t.Name)
		case "message_template_language":
			return d.str(&t.Language)
		case "message_template_category":
			return d.str(&t.Category)
		case "reason":
			return d.str(&t.Reason)
		case "disable_info":
			return decodePtr(d, &t.DisableInfo)
		case "other_info":
			return decodePtr(d, &t.OtherInfo)
		case "rejection_info":
			return decodePtr(d, &t.RejectionInfo)
		default:
			return d.extra(&t.Extra, k)
		}
	})
}

// DisableInfo says when a template was disabled. DisableDate is an int in
// Meta's docs and a string in one library (docs/meta-webhooks.md 11.1).
type DisableInfo struct {
	DisableDate FlexString `json:"disable_date,omitempty"`
	Extra       Extras     `json:"-"`
}

func (i *DisableInfo) decode(d *decoder) error {
	return d.object(func(k []byte) error {
		if string(k) == "disable_date" {
			return d.flexString(&i.DisableDate)
		}
		return d.extra(&i.Extra, k)
	})
}

// OtherInfo explains a pause or lock (title FIRST_PAUSE, SECOND_PAUSE, ...).
type OtherInfo struct {
	Title       string `json:"title,omitempty"`
	Description string `json:"description,omitempty"`
	Extra       Extras `json:"-"`
}

func (i *OtherInfo) decode(d *decoder) error {
	return d.object(func(k []byte) error {
		switch string(k) {
		case "title":
			return d.str(&i.Title)
		case "description":
			return d.str(&i.Description)
		default:
			return d.extra(&i.Extra, k)
		}
	})
}

// RejectionInfo explains an INVALID_FORMAT rejection.
type RejectionInfo struct {
	Reason         string `json:"reason,omitempty"`
	Recommendation string `json:"recommendation,omitempty"`
	Extra          Extras `json:"-"`
}

func (i *RejectionInfo) decode(d *decoder) error {
	return d.object(func(k []byte) error {
		switch string(k) {
		case "reason":
			return d.str(&i.Reason)
		case "recommendation":
			return d.str(&i.Recommendation)
		default:
			return d.extra(&i.Extra, k)
		}
	})
}

// TemplateQualityUpdate is the value of message_template_quality_update
// (docs/meta-webhooks.md 9.7). Scores are GREEN, YELLOW, RED or UNKNOWN.
type TemplateQualityUpdate struct {
	PreviousQualityScore string     `json:"previous_quality_score,omitempty"`
	NewQualityScore      string     `json:"new_quality_score,omitempty"`
	TemplateID           FlexString `json:"message_template_id"`
	Name                 string     `json:"message_template_name,omitempty"`
	Language             string     `json:"message_template_language,omitempty"`
	Extra                Extras     `json:"-"`
}

func (t *TemplateQualityUpdate) decode(d *decoder) error {
	return d.object(func(k []byte) error {
		switch string(k) {
		case "previous_quality_score":
			return d.str(&t.PreviousQualityScore)
		case "new_quality_score":
			return d.str(&t.NewQualityScore)
		case "message_template_id":
			return d.flexString(&t.TemplateID)
		case "message_template_name":
			return d.str(&t.Name)
		case "message_template_language":
			return d.str(&t.Language)
		default:
			return d.extra(&t.Extra, k)
		}
	})
}

// TemplateCategoryUpdate is the value of template_category_update
// (docs/meta-webhooks.md 9.8). An impending change (24 h notice) has CorrectCategory
// and CategoryUpdateTimestamp, with NewCategory the current category; a
// completed change has PreviousCategory and NewCategory.
type TemplateCategoryUpdate struct {
	TemplateID              FlexString `json:"message_template_id"`
	Name                    string     `json:"message_template_name,omitempty"`
	Language                string     `json:"message_template_language,omitempty"`
	PreviousCategory        string     `json:"previous_category,omitempty"`
	NewCategory             string     `json:"new_category,omitempty"`
	CorrectCategory         string     `json:"correct_category,omitempty"`
	CategoryUpdateTimestamp FlexInt64  `json:"category_update_timestamp,omitempty"`
	Extra                   Extras     `json:"-"`
}

// Impending reports whether the update announces a change that has not
// happened yet.
func (t *TemplateCategoryUpdate) Impending() bool { return t.CorrectCategory != "" }

func (t *TemplateCategoryUpdate) decode(d *decoder) error {
	return d.object(func(k []byte) error {
		switch string(k) {
		case "message_template_id":
			return d.flexString(&t.TemplateID)
		case "message_template_name":
			return d.str(&t.Name)
		case "message_template_language":
			return d.str(&t.Language)
		case "previous_category":
			return d.str(&t.PreviousCategory)
		case "new_category":
			return d.str(&t.NewCategory)
		case "correct_category":
			return d.str(&t.CorrectCategory)
		case "category_update_timestamp":
			return d.int(&t.CategoryUpdateTimestamp)
		default:
			return d.extra(&t.Extra, k)
		}
	})
}

// TemplateComponentsUpdate is the value of message_template_components_update
// (docs/meta-webhooks.md 9.9): a template was edited.
type TemplateComponentsUpdate struct {
	TemplateID FlexString `json:"message_template_id"`
	Name       string     `json:"message_template_name,omitempty"`
	Language   string     `json:"message_template_language,omitempty"`
	// Element is the body text; Title the text header.
	Element string           `json:"message_template_element,omitempty"`
	Title   string           `json:"message_template_title,omitempty"`
	Footer  string           `json:"message_template_footer,omitempty"`
	Buttons []TemplateButton `json:"message_template_buttons,omitempty"`
	Extra   Extras           `json:"-"`
}

func (t *TemplateComponentsUpdate) decode(d *decoder) error {
	return d.object(func(k []byte) error {
		switch string(k) {
		case "message_template_id":
			return d.flexString(&t.TemplateID)
		case "message_template_name":
			return d.str(&t.Name)
		case "message_template_language":
			return d.str(&t.Language)
		case "message_template_element":
			return d.str(&t.Element)
		case "message_template_title":
			return d.str(&t.Title)
		case "message_template_footer":
			return d.str(&t.Footer)
		case "message_template_buttons":
			return decodeArray(d, &t.Buttons)
		default:
			return d.extra(&t.Extra, k)
		}
	})
}

// TemplateButton is one button of an edited template.
type TemplateButton struct {
	Type        string `json:"message_template_button_type,omitempty"`
	Text        string `json:"message_template_button_text,omitempty"`
	URL         string `json:"message_template_button_url,omitempty"`
	PhoneNumber string `json:"message_template_button_phone_number,omitempty"`
	Extra       Extras `json:"-"`
}

func (b *TemplateButton) decode(d *decoder) error {
	return d.object(func(k []byte) error {
		switch string(k) {
		case "message_template_button_type":
			return d.str(&b.Type)
		case "message_template_button_text":
			return d.str(&b.Text)
		case "message_template_button_url":
			return d.str(&b.URL)
		case "message_template_button_phone_number":
			return d.str(&b.PhoneNumber)
		default:
			return d.extra(&b.Extra, k)
		}
	})
}
