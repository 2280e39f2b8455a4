// A Foxglove WebSocket client: Foxglove's own protocol library (@foxglove/ws-protocol,
// the one the Foxglove app is built on) over the `ws` package. It subscribes to every
// channel the server advertises and, once each of the topics named on the command line
// has WANT messages, prints one JSON object (the server's info, the channels as
// advertised, the first WANT messages of each topic in base64) and exits 0; exit 1
// after TIMEOUT seconds or on a connection error, saying which.
//
//   node client.mjs URL WANT TIMEOUT TOPIC...
import protocol from "@foxglove/ws-protocol";
import WebSocket from "ws";

const { FoxgloveClient } = protocol;

const [url, want, timeout, ...topics] = process.argv.slice(2);
const wanted = Number(want);
const result = { serverInfo: null, channels: [], messages: {} };
const bySubscription = new Map();
// Foxglove's SDK servers speak the same protocol under the name "foxglove.sdk.v1"
// (FoxgloveClient leaves the name to the socket since ws-protocol 0.7.5), as the
// Foxglove app asks for it.
const ws = new WebSocket(url, ["foxglove.sdk.v1"]);
const client = new FoxgloveClient({ ws });

function finish(code, why) {
  clearTimeout(timer);
  if (why) console.error(why);
  client.close();
  // Exit once the output is flushed: a pipe takes it in parts.
  process.stdout.write(code === 0 ? JSON.stringify(result) + "\n" : "", () => process.exit(code));
}

const timer = setTimeout(() => {
  const counts = Object.fromEntries(topics.map((t) => [t, (result.messages[t] ?? []).length]));
  finish(1, `timed out after ${timeout} s: ${JSON.stringify(counts)}`);
}, Number(timeout) * 1000);

client.on("error", (error) => finish(1, `connection error: ${error?.message ?? error}`));
client.on("serverInfo", (info) => {
  result.serverInfo = { name: info.name, capabilities: info.capabilities };
});
client.on("advertise", (channels) => {
  for (const channel of channels) {
    result.channels.push(channel);
    bySubscription.set(client.subscribe(channel.id), channel);
  }
});
client.on("message", ({ subscriptionId, data }) => {
  const channel = bySubscription.get(subscriptionId);
  if (channel === undefined) return;
  const kept = (result.messages[channel.topic] ??= []);
  if (kept.length < wanted) {
    kept.push(Buffer.from(data.buffer, data.byteOffset, data.byteLength).toString("base64"));
  }
  if (topics.every((t) => (result.messages[t] ?? []).length >= wanted)) finish(0);
});
