'use strict';
// Toolscout's egress preload for Node.js servers behind the egress proxy (service/upstream/egress.py), loaded with
// NODE_OPTIONS=--require. Node before 24 ignores HTTP(S)_PROXY: its fetch() and its http/https modules connect
// straight to the address a caller handed the server. This sends both through the proxy named by HTTPS_PROXY (or
// HTTP_PROXY), every connection a CONNECT tunnel that the proxy checks (no internal address) and opens to the
// address it checked. Built-ins only: no npm package to install.
//
// What it confines: fetch() (Node's bundled undici, through its global dispatcher), and http.request / https.request
// / get with the default agent (also what axios, node-fetch and got use unless handed an agent). What it does not:
// a library's own agent or undici dispatcher, raw net/tls sockets, DNS lookups, UDP. A refusal is an error
// naming the proxy's answer, e.g. "egress proxy refused 127.0.0.1:8080: HTTP/1.1 403 Forbidden - refused: ...".

const net = require('node:net');
const tls = require('node:tls');
const http = require('node:http');
const https = require('node:https');

const env = process.env;
const proxyUrl = env.HTTPS_PROXY || env.https_proxy || env.HTTP_PROXY || env.http_proxy;
if (proxyUrl) install(new URL(proxyUrl));

function install(proxy) {
  const proxyHost = proxy.hostname.replace(/^\[(.*)\]$/, '$1');
  const proxyPort = Number(proxy.port || 80);
  const authorization = proxy.username
    ? 'Basic ' +
      Buffer.from(`${decodeURIComponent(proxy.username)}:${decodeURIComponent(proxy.password)}`).toString('base64')
    : null;

  // A socket connected to host:port through the proxy, handed to callback(error, socket).
  function tunnel(host, port, callback) {
    const bare = String(host).replace(/^\[(.*)\]$/, '$1');
    const target = net.isIPv6(bare) ? `[${bare}]:${port}` : `${bare}:${port}`;
    const socket = net.connect(proxyPort, proxyHost);
    let head = Buffer.alloc(0);
    let settled = false;
    const settle = (error, result) => {
      if (settled) return;
      settled = true;
      socket.removeListener('data', onData);
      socket.removeListener('error', settle);
      socket.removeListener('end', onEnd);
      if (error) socket.destroy();
      callback(error, result);
    };
    const onEnd = () => settle(new Error(`egress proxy closed the tunnel to ${target}`));
    const onData = (chunk) => {
      head = Buffer.concat([head, chunk]);
      const end = head.indexOf('\r\n\r\n');
      if (end < 0) {
        if (head.length > 65536) settle(new Error('egress proxy answer too large'));
        return;
      }
      const status = head.subarray(0, end).toString('latin1').split('\r\n')[0];
      if (!/^HTTP\/1\.[01] 200 /.test(status)) {
        const reason = head.subarray(end + 4).toString('utf8').trim();
        settle(new Error(`egress proxy refused ${target}: ${status}${reason ? ` - ${reason}` : ''}`));
        return;
      }
      const rest = head.subarray(end + 4);
      socket.removeListener('data', onData);
      if (rest.length) socket.unshift(rest);
      settle(null, socket);
    };
    socket.on('data', onData);
    socket.on('error', settle);
    socket.on('end', onEnd);
    socket.once('connect', () => {
      const auth = authorization ? `Proxy-Authorization: ${authorization}\r\n` : '';
      socket.write(`CONNECT ${target} HTTP/1.1\r\nHost: ${target}\r\n${auth}\r\n`);
    });
  }

  // TLS over a tunnel: end to end between this process and the destination, certificates checked as usual.
  function secure(socket, options, callback) {
    const secured = tls.connect({ ...options, socket });
    const failed = (error) => callback(error);
    secured.once('error', failed);
    secured.once('secureConnect', () => {
      secured.removeListener('error', failed);
      callback(null, secured);
    });
  }

  // fetch(): Node's bundled undici keeps its global dispatcher under this symbol (undici's global.js); loading it
  // (any of its classes will do) creates an Agent whose class takes a `connect` function.
  const dispatcherKey = Symbol.for('undici.globalDispatcher.1');
  void globalThis.Headers;
  const current = globalThis[dispatcherKey];
  if (current && current.constructor.name !== 'EnvHttpProxyAgent') {
    // EnvHttpProxyAgent: Node 24+ with NODE_USE_ENV_PROXY=1 already sends fetch() through the proxy.
    globalThis[dispatcherKey] = new current.constructor({
      connect(options, callback) {
        const port = options.port || (options.protocol === 'https:' ? 443 : 80);
        tunnel(options.hostname, port, (error, socket) => {
          if (error) return callback(error);
          if (options.protocol !== 'https:') return callback(null, socket);
          const name = options.servername || options.hostname;
          const servername = net.isIP(name.replace(/^\[(.*)\]$/, '$1')) ? undefined : name;
          secure(socket, { servername, ALPNProtocols: ['http/1.1'] }, callback);
        });
      },
    });
  }

  // http / https modules: their default agents connect through the tunnel.
  // A client that honours HTTP_PROXY itself (axios, request) writes its absolute-form request to the proxy: that
  // connection goes to the proxy as it is, which checks the request.
  class TunnelAgent extends http.Agent {
    createConnection(options, callback) {
      const port = Number(options.port || 80);
      if (options.host === proxyHost && port === proxyPort) return net.connect(port, options.host);
      tunnel(options.host, port, callback);
    }
  }
  class SecureTunnelAgent extends https.Agent {
    createConnection(options, callback) {
      tunnel(options.host, options.port || 443, (error, socket) =>
        error ? callback(error) : secure(socket, options, callback),
      );
    }
  }
  http.globalAgent = new TunnelAgent({ keepAlive: true });
  https.globalAgent = new SecureTunnelAgent({ keepAlive: true });
}
