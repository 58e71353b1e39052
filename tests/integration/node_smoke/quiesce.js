// A client of two routers keeps working while one of them quiesces (the current Node.js
// driver, which monitors with the streaming hello). Usage: node quiesce.js <uri of both
// routers> <pid of the router to stop> <its host:port>. The script sends SIGTERM to that
// router once both routers served operations, keeps working until the stopped router has
// exited and the other one served more, and prints JSON results. No retries: every
// operation must succeed where the driver sent it.
const { MongoClient } = require('mongodb');

function alive(pid) {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return false;
  }
}

async function main() {
  const [uri, pidArg, stoppedHost] = process.argv.slice(2);
  const pid = Number(pidArg);
  const client = new MongoClient(uri, {
    retryWrites: false, retryReads: false, monitorCommands: true,
    localThresholdMS: 10000, serverSelectionTimeoutMS: 10000,
  });
  const served = {};
  const errors = [];
  let streaming = false;
  client.on('commandSucceeded', (ev) => { served[ev.address] = (served[ev.address] || 0) + 1; });
  client.on('commandFailed', (ev) => { errors.push(`${ev.commandName}: ${ev.failure}`); });
  client.on('serverHeartbeatSucceeded', (ev) => { if (ev.awaited) streaming = true; });
  await client.connect();
  const coll = client.db('nodequiesce').collection('c');
  let stop = false;
  let sentSignal = false;
  let otherAtStop = 0;
  const other = () => Object.keys(served).find((h) => h !== stoppedHost);

  async function work(k) {
    for (let i = 0; !stop; i++) {
      try {
        await coll.insertOne({ _id: `${k}-${i}` });
        if (!(await coll.findOne({ _id: `${k}-${i}` }))) errors.push(`missing ${k}-${i}`);
      } catch (e) {
        errors.push(String(e));
      }
    }
  }

  async function control() {
    const deadline = Date.now() + 60000;
    while (Date.now() < deadline) {
      const o = other();
      if (!sentSignal && (served[stoppedHost] || 0) > 20 && o && served[o] > 20) {
        process.kill(pid, 'SIGTERM');
        sentSignal = true;
      } else if (sentSignal && !alive(pid) && !otherAtStop) {
        otherAtStop = served[o];
      } else if (otherAtStop && served[o] > otherAtStop + 50) {
        break;
      }
      await new Promise((r) => setTimeout(r, 20));
    }
    stop = true;
  }

  await Promise.all([work(0), work(1), control()]);
  console.log(JSON.stringify({
    errors: errors.slice(0, 5), nerrors: errors.length, served, sentSignal, otherAtStop,
    streaming,
  }));
  await client.close();
}

main().catch((e) => { console.error(e); process.exit(1); });
