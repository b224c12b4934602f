package mqtt

import "github.com/lockstream/lockstream/internal/settings"

// RegisterSettings declares the MQTT bridge's settings.
func (c *Config) RegisterSettings(s *settings.Set) {
	s.String(&c.URL, "", settings.Decl{Name: "mqtt-url",
		Doc: "MQTT broker (Mosquitto) of the bridge, e.g. mqtt://127.0.0.1:1883; empty = no MQTT bridge"})
	s.String(&c.Topic, DefaultTopic, settings.Decl{Name: "mqtt-topic",
		Doc: "topic filter of readings (shared subscription $share/lockstream/<filter>); the last level is the sensor id"})
	s.String(&c.ClientID, "", settings.Decl{Name: "mqtt-client-id",
		Doc: "MQTT client id of the bridge's persistent session: stable across restarts, one per bridge (empty = lockstream-<host name>)"})
	s.Int(&c.Inflight, DefaultInflight, settings.Decl{Name: "mqtt-inflight",
		Doc: "unacknowledged MQTT messages a bridge holds at most (Receive Maximum); keep it below the broker's queue limit"})
}
