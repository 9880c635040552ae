import { defineConfig } from "vitest/config";
import react from "@vitejs/plugin-react";

// Fixed file names (no content hashes): the service embeds exactly these three files,
// and a test compares them with a fresh build.
export default defineConfig({
  base: "/console/",
  plugins: [react()],
  build: {
    outDir: "dist",
    emptyOutDir: true,
    assetsDir: "",
    sourcemap: false,
    modulePreload: { polyfill: false },
    rollupOptions: {
      output: {
        entryFileNames: "console.js",
        chunkFileNames: "console-[name].js",
        assetFileNames: "console.[ext]",
      },
    },
  },
  test: { environment: "jsdom", globals: true },
});
