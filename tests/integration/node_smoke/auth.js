// The Node.js driver authenticates to Shale: SCRAM-SHA-256 (speculatively, in its
// handshake), SCRAM-SHA-1, and a wrong password. Usage: node auth.js <host:port> <user> <pwd>.
// Prints JSON results.
const { MongoClient } = require('mongodb');

async function attempt(host, user, pwd, mech) {
  const q = mech ? `?authMechanism=${mech}` : '';
  const uri = `mongodb://${encodeURIComponent(user)}:${encodeURIComponent(pwd)}@${host}/admin${q}`;
  const client = new MongoClient(uri, { serverSelectionTimeoutMS: 5000 });
  try {
    await client.connect();
    const st = await client.db('admin').command({ connectionStatus: 1 });
    const coll = client.db('nodeauth').collection('c');
    await coll.insertOne({ mech: mech || 'default' });
    const n = await coll.countDocuments({});
    return { users: st.authInfo.authenticatedUsers, n };
  } catch (e) {
    return { code: e.code, message: e.message };
  } finally {
    await client.close();
  }
}

async function main() {
  const [host, user, pwd] = process.argv.slice(2);
  const out = {
    default: await attempt(host, user, pwd, null),
    sha1: await attempt(host, user, pwd, 'SCRAM-SHA-1'),
    sha256: await attempt(host, user, pwd, 'SCRAM-SHA-256'),
    wrong: await attempt(host, user, pwd + 'x', 'SCRAM-SHA-256'),
  };
  console.log(JSON.stringify(out));
}
main().catch((e) => { console.error(e); process.exit(1); });
