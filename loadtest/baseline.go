package loadtest

import (
	"net"

	"github.com/gofiber/fiber/v2"
)

// ServeBaseline answers every POST /webhook with 200 and does nothing else:
// the bare Fiber handler that wahook's throughput is quoted against. It
// returns when ln is closed.
func ServeBaseline(ln net.Listener) error {
	app := fiber.New(fiber.Config{DisableStartupMessage: true, BodyLimit: 4 << 20})
	app.Post("/webhook", func(c *fiber.Ctx) error { return c.SendStatus(fiber.StatusOK) })
	return app.Listener(ln)
}
