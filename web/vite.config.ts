import react from '@vitejs/plugin-react';
import { fileURLToPath } from 'node:url';
import { defineConfig } from 'vite';

// The dashboard builds into web/dist, which `baton up` serves at /. Types come from ../src
// (the API's own schemas); only type imports and the fetch-based client cross that line.
export default defineConfig({
  root: fileURLToPath(new URL('.', import.meta.url)),
  base: '/',
  plugins: [react()],
  build: { outDir: 'dist', emptyOutDir: true, sourcemap: false, chunkSizeWarningLimit: 1024 },
  server: { proxy: { '/v1': 'http://127.0.0.1:7070', '/mcp': 'http://127.0.0.1:7070' } },
});
