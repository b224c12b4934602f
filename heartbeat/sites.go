package heartbeat

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/lockstream/lockstream/event"
)

// Sites keeps site outages (PostgresStore): one open outage per site,
// whichever daemon opens it.
type Sites interface {
	SiteMembers(ctx context.Context, sites []string) (map[string][]string, error)
	OpenSiteOutages(ctx context.Context, outages []SiteOutage, now time.Time) (opened []SiteOutage, err error)
	SiteOutagesListing(ctx context.Context, losses []Deadline) (map[string]string, error)
	MarkSiteEventsPublished(ctx context.Context, ids []string, restored bool, at time.Time) error
	UnpublishedSiteEvents(ctx context.Context, before time.Time, limit int, restored bool) ([]SiteOutage, error)
	OpenSiteOutagesPublished(ctx context.Context, limit int) ([]SiteOutage, error)
	CloseSiteOutages(ctx context.Context, ids []string, at time.Time) ([]SiteOutage, error)
}

// SiteStore is the Redis side of site judgement (RedisStore).
type SiteStore interface {
	DeferHeartbeatLosses(ctx context.Context, losses []Deadline, hold time.Duration) error
	HeartbeatStatuses(ctx context.Context, sensorIDs []string) (map[string]RedisStatus, error)
}

// judged is a chunk of claimed losses ready to publish: the events (losses,
// covered ones marked, and the site_outages this daemon opened) and what to
// confirm afterwards.
type judged struct {
	events []event.Event
	ready  []Deadline
	opened []string
}

// judge reads the losses' states and sites, holds the losses of sensors with
// a site until SiteHold after their deadline, and judges the sites of the
// others: a site with at least SiteOutageMin, and at least half, of its
// sensors lost within one Timeout gets one site_outage (OpenSiteOutages
// decides between daemons), and the losses it lists are marked covered.
func (d *Daemon) judge(ctx context.Context, losses []Deadline) (judged, error) {
	var j judged
	facts := map[string]SensorFact{}
	if d.deps.States != nil {
		ids := make([]string, len(losses))
		for i, l := range losses {
			ids[i] = l.SensorID
		}
		var err error
		if facts, err = d.deps.States.SensorFacts(ctx, ids); err != nil {
			return j, fmt.Errorf("reading the states of %d lost sensors: %w", len(ids), err)
		}
	}
	now := d.cfg.Now()
	var held []Deadline
	for _, l := range losses {
		if d.sitesOn() && facts[l.SensorID].Site != "" && l.Deadline.Add(d.cfg.SiteHold).After(now) {
			held = append(held, l)
			continue
		}
		j.ready = append(j.ready, l)
	}
	if len(held) > 0 {
		if err := d.deps.SiteStore.DeferHeartbeatLosses(ctx, held, d.cfg.SiteHold); err != nil {
			return j, err
		}
	}
	// A loss inside a maintenance window is expected: covered by the window's
	// maintenance_ended, and no reason to judge its site.
	maintained, err := d.inMaintenance(ctx, j.ready, facts)
	if err != nil {
		return j, err
	}
	sites := map[string]bool{}
	var sited []Deadline
	for _, l := range j.ready {
		if site := facts[l.SensorID].Site; site != "" && d.sitesOn() && maintained[l.SensorID] == "" {
			sites[site] = true
			sited = append(sited, l)
		}
	}
	covered, siteEvents, opened, err := d.judgeSites(ctx, slices.Sorted(maps.Keys(sites)), sited)
	if err != nil {
		return j, err
	}
	for sensor, id := range maintained {
		if covered == nil {
			covered = map[string]string{}
		}
		covered[sensor] = id
	}
	for _, l := range j.ready {
		e := lostEvent(l.SensorID, l.Deadline)
		if f, ok := facts[l.SensorID]; ok && f.Data != nil {
			e.Data = f.Data
		}
		e.Severity = event.SeverityOf(e.Type, e.Data)
		e.CoveredBy = covered[l.SensorID]
		j.events = append(j.events, e)
	}
	j.events = append(j.events, siteEvents...)
	j.opened = opened
	return j, nil
}

func (d *Daemon) sitesOn() bool { return d.deps.Sites != nil && d.deps.SiteStore != nil }

// judgeSites opens the outages of sites that qualify and returns, for each
// of losses (of sensors of those sites) that an outage lists and that fell
// while it was open, the outage's id; the site_outage events of the outages
// this daemon opened; and their ids. An outage covers its losses even when
// its site no longer qualifies by the time they are judged (sensors back
// while a killed daemon's claims ran out): it is delivered instead of them.
func (d *Daemon) judgeSites(ctx context.Context, sites []string, losses []Deadline) (map[string]string, []event.Event, []string, error) {
	if len(sites) == 0 {
		return nil, nil, nil, nil
	}
	members, err := d.deps.Sites.SiteMembers(ctx, sites)
	if err != nil {
		return nil, nil, nil, err
	}
	var all []string
	for _, ids := range members {
		all = append(all, ids...)
	}
	statuses, err := d.deps.SiteStore.HeartbeatStatuses(ctx, all)
	if err != nil {
		return nil, nil, nil, err
	}
	var candidates []SiteOutage
	for _, site := range sites {
		if o, ok := d.siteOutage(site, members[site], statuses); ok {
			candidates = append(candidates, o)
		}
	}
	opened, err := d.deps.Sites.OpenSiteOutages(ctx, candidates, d.cfg.Now())
	if err != nil {
		return nil, nil, nil, err
	}
	// After the insert: it sees the outages that this daemon and any other
	// opened meanwhile.
	covered, err := d.deps.Sites.SiteOutagesListing(ctx, losses)
	if err != nil {
		return nil, nil, nil, err
	}
	events := make([]event.Event, len(opened))
	ids := make([]string, len(opened))
	for i, o := range opened {
		events[i], ids[i] = siteEvent(o, false), o.ID
		d.logger.InfoContext(ctx, "site outage", "site", o.Site, "sensors", o.Sensors)
	}
	return covered, events, ids, nil
}

// siteOutage judges one site: its sensors lost within one Timeout of the
// latest loss among them, when there are at least SiteOutageMin of them and
// at least half of the site.
func (d *Daemon) siteOutage(site string, members []string, statuses map[string]RedisStatus) (SiteOutage, bool) {
	var latest time.Time
	for _, id := range members {
		if m := statuses[id].Missed; m.After(latest) {
			latest = m
		}
	}
	o := SiteOutage{Site: site}
	for _, id := range members {
		m := statuses[id].Missed
		if m.IsZero() || m.Before(latest.Add(-d.cfg.Timeout)) {
			continue
		}
		o.Sensors = append(o.Sensors, id)
		if o.StartedAt.IsZero() || m.Before(o.StartedAt) {
			o.StartedAt = m
		}
	}
	if len(o.Sensors) < d.cfg.SiteOutageMin || 2*len(o.Sensors) < len(members) {
		return SiteOutage{}, false
	}
	o.StartedAt = o.StartedAt.UTC()
	o.ID = event.SiteOutageID(site, o.StartedAt)
	return o, true
}

// siteEvent is an outage's site_outage, or its site_restored, made from the
// stored outage alone: a republication (sweepSites) repeats the first
// publication exactly, at included, which the fan-out's unique key (event
// id, client, at) needs to drop it. So a site_outage is at its StartedAt (the
// earliest deadline, which its id derives from), not at a time read from
// Redis, which changes as sensors come back.
func siteEvent(o SiteOutage, restored bool) event.Event {
	e := event.Event{ID: o.ID, Type: event.SiteOutage, Site: o.Site, Sensors: o.Sensors, SensorID: o.Sensors[0],
		At: o.StartedAt.UTC()}
	if restored {
		e.Type, e.At = event.SiteRestored, o.RestoredAt.UTC()
		e.ID = event.SiteRestoredID(o.Site, o.StartedAt)
	}
	e.Severity = event.SeverityOf(e.Type, nil)
	return e
}

// sweepSites publishes the site events whose publisher failed or died, and
// ends the outages of sites more than half of whose lost sensors are back,
// publishing one site_restored each (CloseSiteOutages decides between
// daemons).
func (d *Daemon) sweepSites(ctx context.Context) error {
	if !d.sitesOn() {
		return nil
	}
	before := d.cfg.Now().Add(-2 * d.cfg.PublishTimeout)
	for _, restored := range []bool{false, true} {
		stale, err := d.deps.Sites.UnpublishedSiteEvents(ctx, before, d.cfg.ClaimBatch, restored)
		if err != nil {
			return err
		}
		if err := d.publishSiteEvents(ctx, stale, restored); err != nil {
			return err
		}
	}
	open, err := d.deps.Sites.OpenSiteOutagesPublished(ctx, d.cfg.ClaimBatch)
	if err != nil || len(open) == 0 {
		return err
	}
	var ids []string
	for _, o := range open {
		ids = append(ids, o.Sensors...)
	}
	statuses, err := d.deps.SiteStore.HeartbeatStatuses(ctx, ids)
	if err != nil {
		return err
	}
	var back []string
	for _, o := range open {
		lost := 0
		for _, id := range o.Sensors {
			if !statuses[id].Missed.IsZero() {
				lost++
			}
		}
		if 2*(len(o.Sensors)-lost) > len(o.Sensors) {
			back = append(back, o.ID)
		}
	}
	closed, err := d.deps.Sites.CloseSiteOutages(ctx, back, d.cfg.Now())
	if err != nil {
		return err
	}
	return d.publishSiteEvents(ctx, closed, true)
}

// publishSiteEvents publishes the site_outage (or site_restored) of outages
// and records them published. Their ids are deterministic: a repeat is
// dropped downstream.
func (d *Daemon) publishSiteEvents(ctx context.Context, outages []SiteOutage, restored bool) error {
	if len(outages) == 0 {
		return nil
	}
	events := make([]event.Event, len(outages))
	ids := make([]string, len(outages))
	for i, o := range outages {
		events[i], ids[i] = siteEvent(o, restored), o.ID
		if restored {
			d.logger.InfoContext(ctx, "site restored", "site", o.Site)
		}
	}
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), d.cfg.PublishTimeout)
	defer cancel()
	if err := d.deps.Publisher.Publish(pctx, events); err != nil {
		return fmt.Errorf("publishing %d site events: %w", len(events), err)
	}
	if restored {
		d.siteRestored.Add(float64(len(events)))
	} else {
		d.siteOutages.Add(float64(len(events)))
	}
	return d.deps.Sites.MarkSiteEventsPublished(pctx, ids, restored, d.cfg.Now())
}
