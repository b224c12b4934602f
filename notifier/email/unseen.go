package email

import (
	"cmp"
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/wneessen/go-mail"

	"github.com/lockstream/lockstream/notifier"
)

// unseenView is what the unseen and digest templates see.
type unseenView struct {
	ID         string
	MemberName string
	Digest     bool
	Count      int
	// About names the episode's sensor or type (the newest message's).
	About string
	Items []unseenItem
}

// unseenItem is one listed message.
type unseenItem struct {
	Title    string
	Severity string
	Critical bool
	At       string
	// AtRFC3339 is in UTC, for the HTML time element.
	AtRFC3339 string
	// AckURL is an incident reminder's one-click ack link, or empty.
	AckURL string
}

// SendUnseen makes one attempt to mail an escalation (the messages of an
// episode the member left unseen, or a digest), or one free-form notification
// (u.Notification), to the address to, with a plain-text and an HTML body, and
// classifies it as Send does.
func (s *Sender) SendUnseen(ctx context.Context, to string, u notifier.Unseen) notifier.Result {
	msg, err := s.unseenMessage(to, u)
	return s.send(ctx, msg, err)
}

// unseenMessage renders u into a mail to the address to.
func (s *Sender) unseenMessage(to string, u notifier.Unseen) (*mail.Msg, error) {
	if !validMessageIDPart(u.ID) {
		return nil, fmt.Errorf("delivery id %q cannot form a Message-ID", u.ID)
	}
	if len(u.Messages) == 0 {
		return nil, fmt.Errorf("escalation %s lists no message", u.ID)
	}
	loc, err := time.LoadLocation(cmp.Or(u.Timezone, "UTC"))
	if err != nil {
		loc = time.UTC
	}
	v := unseenView{ID: u.ID, MemberName: u.MemberName, Digest: u.Digest, Count: len(u.Messages)}
	for _, m := range u.Messages {
		v.Items = append(v.Items, unseenItem{Title: unseenTitle(m), Severity: m.Severity,
			Critical: m.Severity == "critical", At: m.At.In(loc).Format("Mon, 02 Jan 2006 15:04 MST"),
			AtRFC3339: m.At.UTC().Format(time.RFC3339), AckURL: m.AckURL})
	}
	v.About = unseenAbout(u.Messages[0])
	name := "unseen"
	switch {
	case u.Notification:
		name = "notification"
	case u.Digest:
		name = "digest"
	}
	return s.render(to, u.ID, name, "", v)
}

// unseenAbout names what a message is about: its sensor, or its type.
func unseenAbout(m notifier.UnseenMessage) string {
	if m.SensorID == "" {
		return m.Type
	}
	return "sensor " + m.SensorID
}

// unseenSite names the site of a site event's message.
func unseenSite(m notifier.UnseenMessage) string {
	if m.SensorSite == "" {
		return "The site of sensor " + m.SensorID
	}
	return "Site " + m.SensorSite
}

// unseenTitle says in a sentence what a message was.
func unseenTitle(m notifier.UnseenMessage) string {
	if m.SensorID == "" {
		return cmp.Or(strings.TrimSpace(m.Subject), m.Type)
	}
	where := cmp.Or(strings.TrimSpace(m.SensorAddress), "no address on record")
	switch m.Type {
	case "state_changed":
		return fmt.Sprintf("Sensor %s (%s) became %s", m.SensorID, where, stateWord(m.Data))
	case "connection_lost":
		return fmt.Sprintf("Sensor %s (%s) lost its connection while %s", m.SensorID, where, stateWord(m.Data))
	case "connection_restored":
		title := fmt.Sprintf("Sensor %s (%s) is back online, %s", m.SensorID, where, stateWord(m.Data))
		if subject := strings.TrimSpace(m.Subject); subject != "" {
			title += "; " + subject // "back after 2 h 14 min"
		}
		return title
	case "sensor_open_too_long":
		return fmt.Sprintf("Sensor %s (%s) has been unlocked too long", m.SensorID, where)
	// A site event's message is kept under its first sensor, whose site names it.
	case "site_outage":
		return fmt.Sprintf("%s lost several sensors at once, among them sensor %s (%s)", unseenSite(m), m.SensorID, where)
	case "site_restored":
		return fmt.Sprintf("%s is back, among them sensor %s (%s)", unseenSite(m), m.SensorID, where)
	case "maintenance_ended":
		return fmt.Sprintf("A maintenance window of sensor %s (%s) or its site ended", m.SensorID, where)
	case "sensor_unstable":
		return fmt.Sprintf("Sensor %s (%s) changes too often, %s now", m.SensorID, where, stateWord(m.Data))
	case "sensor_stable":
		return fmt.Sprintf("Sensor %s (%s) settled, %s", m.SensorID, where, stateWord(m.Data))
	}
	return fmt.Sprintf("Sensor %s (%s): %s", m.SensorID, where, m.Type)
}
