/// <reference types="vitest/config" />
// The console is served by the runner at /console; `npm run build` writes dist/.
import { defineConfig } from "vite";
import react from "@vitejs/plugin-react";

export default defineConfig({
  base: "/console/",
  plugins: [react()],
  build: { outDir: "dist", emptyOutDir: true, chunkSizeWarningLimit: 2000 },
  worker: { format: "es" },
  test: { environment: "node", include: ["src/**/*.test.ts"] },
});
