package meta

// This file holds the payloads of inbound text, media, location and contacts
// messages (docs/meta-webhooks.md 7.2).

// Text is the payload of a text message.
type Text struct {
	Body  string `json:"body"`
	Extra Extras `json:"-"`
}

func (t *Text) decode(d *decoder) error {
	return d.object(func(k []byte) error {
		if string(k) == "body" {
			return d.str(&t.Body)
		}
		return d.extra(&t.Extra, k)
	})
}

// Media is the payload of an image, video, audio, document or sticker
// message. SHA256 is opaque (base64 in Meta's examples, hex in others).
type Media struct {
	ID       string `json:"id,omitempty"`
	MimeType string `json:"mime_type,omitempty"`
	SHA256   string `json:"sha256,omitempty"`
	Caption  string `json:"caption,omitempty"`
	Filename string `json:"filename,omitempty"`
	// URL is the download URL, sent from November 2025 on.
	URL string `json:"url,omitempty"`
	// Voice marks a voice note (audio).
	Voice bool `json:"voice,omitempty"`
	// Animated marks an animated sticker.
	Animated bool   `json:"animated,omitempty"`
	Extra    Extras `json:"-"`
}

func (m *Media) decode(d *decoder) error {
	return d.object(func(k []byte) error {
		switch string(k) {
		case "id":
			return d.str(&m.ID)
		case "mime_type":
			return d.str(&m.MimeType)
		case "sha256":
			return d.str(&m.SHA256)
		case "caption":
			return d.str(&m.Caption)
		case "filename":
			return d.str(&m.Filename)
		case "url":
			return d.str(&m.URL)
		case "voice":
			return d.bool(&m.Voice)
		case "animated":
			return d.bool(&m.Animated)
		default:
			return d.extra(&m.Extra, k)
		}
	})
}

// Location is the payload of a location message. Latitude and longitude are
// numbers in Meta's examples and strings in one library (docs/meta-webhooks.md 11.1).
type Location struct {
	Latitude  FlexFloat64 `json:"latitude"`
	Longitude FlexFloat64 `json:"longitude"`
	Name      string      `json:"name,omitempty"`
	Address   string      `json:"address,omitempty"`
	URL       string      `json:"url,omitempty"`
	Extra     Extras      `json:"-"`
}

func (l *Location) decode(d *decoder) error {
	return d.object(func(k []byte) error {
		switch string(k) {
		case "latitude":
			return d.float(&l.Latitude)
		case "longitude":
			return d.float(&l.Longitude)
		case "name":
			return d.str(&l.Name)
		case "address":
			return d.str(&l.Address)
		case "url":
			return d.str(&l.URL)
		default:
			return d.extra(&l.Extra, k)
		}
	})
}

// SharedContact is one vCard of a contacts message; it is unrelated to
// value.contacts (the sender).
type SharedContact struct {
	Name      ContactName      `json:"name"`
	Phones    []ContactPhone   `json:"phones,omitempty"`
	Emails    []ContactEmail   `json:"emails,omitempty"`
	Addresses []ContactAddress `json:"addresses,omitempty"`
	Org       *ContactOrg      `json:"org,omitempty"`
	URLs      []ContactURL     `json:"urls,omitempty"`
	Birthday  string           `json:"birthday,omitempty"`
	Extra     Extras           `json:"-"`
}

func (c *SharedContact) decode(d *decoder) error {
	return d.object(func(k []byte) error {
		switch string(k) {
		case "name":
			return decodeIn(d, &c.Name)
		case "phones":
			return decodeArray(d, &c.Phones)
		case "emails":
			return decodeArray(d, &c.Emails)
		case "addresses":
			return decodeArray(d, &c.Addresses)
		case "org":
			return decodePtr(d, &c.Org)
		case "urls":
			return decodeArray(d, &c.URLs)
		case "birthday":
			return d.str(&c.Birthday)
		default:
			return d.extra(&c.Extra, k)
		}
	})
}

// ContactName is a shared contact's name.
type ContactName struct {
	FormattedName string `json:"formatted_name,omitempty"`
	FirstName     string `json:"first_name,omitempty"`
	LastName      string `json:"last_name,omitempty"`
	MiddleName    string `json:"middle_name,omitempty"`
	Suffix        string `json:"suffix,omitempty"`
	Prefix        string `json:"prefix,omitempty"`
	Extra         Extras `json:"-"`
}

func (n *ContactName) decode(d *decoder) error {
	return d.object(func(k []byte) error {
		switch string(k) {
		case "formatted_name":
			return d.str(&n.FormattedName)
		case "first_name":
			return d.str(&n.FirstName)
		case "last_name":
			return d.str(&n.LastName)
		case "middle_name":
			return d.str(&n.MiddleName)
		case "suffix":
			return d.str(&n.Suffix)
		case "prefix":
			return d.str(&n.Prefix)
		default:
			return d.extra(&n.Extra, k)
		}
	})
}

// ContactPhone is a shared contact's phone number.
type ContactPhone struct {
	Phone string `json:"phone,omitempty"`
	WaID  string `json:"wa_id,omitempty"`
	Type  string `json:"type,omitempty"`
	Extra Extras `json:"-"`
}

func (p *ContactPhone) decode(d *decoder) error {
	return d.object(func(k []byte) error {
		switch string(k) {
		case "phone":
			return d.str(&p.Phone)
		case "wa_id":
			return d.str(&p.WaID)
		case "type":
			return d.str(&p.Type)
		default:
			return d.extra(&p.Extra, k)
		}
	})
}

// ContactEmail is a shared contact's email address.
type ContactEmail struct {
	Email string `json:"email,omitempty"`
	Type  string `json:"type,omitempty"`
	Extra Extras `json:"-"`
}

func (e *ContactEmail) decode(d *decoder) error {
	return d.object(func(k []byte) error {
		switch string(k) {
		case "email":
			return d.str(&e.Email)
		case "type":
			return d.str(&e.Type)
		default:
			return d.extra(&e.Extra, k)
		}
	})
}

// ContactAddress is a shared contact's postal address.
type ContactAddress struct {
	Street      string `json:"street,omitempty"`
	City        string `json:"city,omitempty"`
	State       string `json:"state,omitempty"`
	Zip         string `json:"zip,omitempty"`
	Country     string `json:"country,omitempty"`
	CountryCode string `json:"country_code,omitempty"`
	Type        string `json:"type,omitempty"`
	Extra       Extras `json:"-"`
}

func (a *ContactAddress) decode(d *decoder) error {
	return d.object(func(k []byte) error {
		switch string(k) {
		case "street":
			return d.str(&a.Street)
		case "city":
			return d.str(&a.City)
		case "state":
			return d.str(&a.State)
		case "zip":
			return d.str(&a.Zip)
		case "country":
			return d.str(&a.Country)
		case "country_code":
			return d.str(&a.CountryCode)
		case "type":
			return d.str(&a.Type)
		default:
			return d.extra(&a.Extra, k)
		}
	})
}

// ContactOrg is a shared contact's organisation.
type ContactOrg struct {
	Company    string `json:"company,omitempty"`
	Department string `json:"department,omitempty"`
	Title      string `json:"title,omitempty"`
	Extra      Extras `json:"-"`
}

func (o *ContactOrg) decode(d *decoder) error {
	return d.object(func(k []byte) error {
		switch string(k) {
		case "company":
			return d.str(&o.Company)
		case "department":
			return d.str(&o.Department)
		case "title":
			return d.str(&o.Title)
		default:
			return d.extra(&o.Extra, k)
		}
	})
}

// ContactURL is a shared contact's URL.
type ContactURL struct {
	URL   string `json:"url,omitempty"`
	Type  string `json:"type,omitempty"`
	Extra Extras `json:"-"`
}

func (u *ContactURL) decode(d *decoder) error {
	return d.object(func(k []byte) error {
		switch string(k) {
		case "url":
			return d.str(&u.URL)
		case "type":
			return d.str(&u.Type)
		default:
			return d.extra(&u.Extra, k)
		}
	})
}
