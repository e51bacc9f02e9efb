// Sign in with a console user; the token carries the user's role.
import { useQueryClient } from "@tanstack/react-query";
import { useNavigate } from "@tanstack/react-router";
import { useState } from "react";
import { api, errorText, setToken } from "../api/client";

export function SignIn() {
  const [username, setUsername] = useState("");
  const [password, setPassword] = useState("");
  const [error, setError] = useState("");
  const nav = useNavigate();
  const qc = useQueryClient();
  async function submit(e: React.FormEvent) {
    e.preventDefault();
    const r = await api.POST("/v1/auth/token", { body: { username, password } });
    if (!r.response.ok || !r.data) { setError(errorText(r.error) || "Sign-in failed"); return; }
    setToken(r.data.access_token);
    qc.clear();
    nav({ to: r.data.role === "analyst" ? "/review" : "/" });
  }
  return (
    <main className="page signin">
      <h1>Sign in to Railflow</h1>
      <form onSubmit={submit}>
        <label className="field"><span>Username</span><input name="username" autoComplete="username" value={username} onChange={(e) => setUsername(e.target.value)} required /></label>
        <label className="field"><span>Password</span><input name="password" type="password" autoComplete="current-password" value={password} onChange={(e) => setPassword(e.target.value)} required /></label>
        {error && <p className="error" role="alert">{error}</p>}
        <button className="primary" type="submit">Sign in</button>
      </form>
    </main>
  );
}
